use serde::{Deserialize, Serialize};

/// SSL costs of the CAP paper's secure workload model (§4.2, Table 2).
///
/// CPU: public-key encryption of the key material once per handshake (RSA-256 at 38.5 Kbit/s),
/// then bulk encryption (Triple DES at 46,886 Kbit/s) and the MAC (MD5 at 331,034 Kbit/s) over
/// every byte of the response. Transmission: the server certificate (2048 bytes) and the server
/// hello and close messages (73 bytes) per handshake, and a record header (about 29 bytes) per SSL
/// record. Kbit is 10^3 bits.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SslCosts {
    pub rsa_kbit_per_s: f64,
    /// Size of the key material RSA encrypts per handshake; the paper's RSA key is 256 bits.
    pub rsa_key_bits: f64,
    pub des3_kbit_per_s: f64,
    pub md5_kbit_per_s: f64,
    pub certificate_bytes: u64,
    pub hello_close_bytes: u64,
    pub record_header_bytes: u64,
    /// Plaintext bytes per SSL record; 16 KiB is the protocol's maximum record size.
    pub record_bytes: u64,
}

impl Default for SslCosts {
    fn default() -> Self {
        SslCosts {
            rsa_kbit_per_s: 38.5,
            rsa_key_bits: 256.0,
            des3_kbit_per_s: 46_886.0,
            md5_kbit_per_s: 331_034.0,
            certificate_bytes: 2048,
            hello_close_bytes: 73,
            record_header_bytes: 29,
            record_bytes: 16_384,
        }
    }
}

impl SslCosts {
    /// CPU seconds (speed 1) of one handshake's public-key operation.
    pub fn handshake_cpu_s(&self) -> f64 {
        self.rsa_key_bits / (self.rsa_kbit_per_s * 1e3)
    }

    /// CPU seconds (speed 1) to encrypt and MAC `bytes` of response.
    pub fn bulk_cpu_s(&self, bytes: u64) -> f64 {
        let bits = bytes as f64 * 8.0;
        bits / (self.des3_kbit_per_s * 1e3) + bits / (self.md5_kbit_per_s * 1e3)
    }

    /// Extra bytes on the wire for a response of `bytes`, with or without a handshake.
    pub fn overhead_bytes(&self, bytes: u64, handshake: bool) -> u64 {
        let records = bytes.div_ceil(self.record_bytes.max(1)).max(1);
        let hs = if handshake {
            self.certificate_bytes + self.hello_close_bytes
        } else {
            0
        };
        hs + records * self.record_header_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_2_costs() {
        let s = SslCosts::default();
        // 256 bits at 38.5 Kbit/s.
        assert!((s.handshake_cpu_s() - 0.006_649_35).abs() < 1e-8);
        // 5125 bytes: 41000 bits / 46.886 Mbit/s + 41000 bits / 331.034 Mbit/s.
        let want = 41_000.0 / 46_886_000.0 + 41_000.0 / 331_034_000.0;
        assert!((s.bulk_cpu_s(5125) - want).abs() < 1e-12);
        assert_eq!(s.overhead_bytes(5125, true), 2048 + 73 + 29);
        assert_eq!(s.overhead_bytes(40_000, false), 3 * 29);
    }
}
