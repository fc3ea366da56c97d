//! Response header fields packed into one allocation for storage.
//!
//! A `HeaderMap` costs ~115 bytes per field (its index, its entries, a shared buffer per
//! value); a million stored small responses with six fields each would spend ~690 MB on that
//! alone (measured in `store::memory`). Packed, a field costs its name and value bytes plus six.
//! A hit unpacks them into a `HeaderMap` whose values are slices of the packed block, so no
//! value bytes are copied.

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};

/// Header fields as `[u16 name length][name][u32 value length][value]`, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PackedHeaders {
    block: Bytes,
    count: u32,
}

impl PackedHeaders {
    /// Packs `headers` (repeated fields kept in order) into one exact-size allocation.
    pub fn pack(headers: &HeaderMap) -> PackedHeaders {
        let size: usize = headers
            .iter()
            .map(|(n, v)| 6 + n.as_str().len() + v.len())
            .sum();
        let mut block = BytesMut::with_capacity(size);
        for (name, value) in headers {
            block.put_u16(name.as_str().len() as u16);
            block.put_slice(name.as_str().as_bytes());
            block.put_u32(value.len() as u32);
            block.put_slice(value.as_bytes());
        }
        PackedHeaders {
            block: block.freeze(),
            count: headers.len() as u32,
        }
    }

    /// Fields stored.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes the packed block takes.
    pub fn packed_len(&self) -> usize {
        self.block.len()
    }

    /// Every field as (lower-case name, value bytes), in stored order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> + '_ {
        Fields {
            block: &self.block,
            at: 0,
        }
        .map(|(name, value)| (name, &self.block[value]))
    }

    /// The value of the first field called `name` (lower case).
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// The fields as a `HeaderMap`; values share the packed block.
    pub fn unpack(&self) -> HeaderMap {
        let mut map = HeaderMap::with_capacity(self.len());
        for (name, range) in (Fields {
            block: &self.block,
            at: 0,
        }) {
            let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_maybe_shared(self.block.slice(range)),
            ) else {
                // Packed from a valid HeaderMap, so this does not happen; skip rather than panic.
                continue;
            };
            map.append(name, value);
        }
        map
    }
}

/// Walks the packed block: each field's name and the byte range of its value.
struct Fields<'a> {
    block: &'a [u8],
    at: usize,
}

impl<'a> Iterator for Fields<'a> {
    type Item = (&'a str, std::ops::Range<usize>);

    fn next(&mut self) -> Option<Self::Item> {
        let b = self.block;
        let name_len = u16::from_be_bytes(b.get(self.at..self.at + 2)?.try_into().ok()?) as usize;
        let name_at = self.at + 2;
        let name = std::str::from_utf8(b.get(name_at..name_at + name_len)?).ok()?;
        let len_at = name_at + name_len;
        let value_len = u32::from_be_bytes(b.get(len_at..len_at + 4)?.try_into().ok()?) as usize;
        let value_at = len_at + 4;
        b.get(value_at..value_at + value_len)?;
        self.at = value_at + value_len;
        Some((name, value_at..value_at + value_len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_keeps_every_field_in_order_and_unpacks_without_copying_values() {
        let mut h = HeaderMap::new();
        h.insert("content-type", HeaderValue::from_static("text/html"));
        h.append("set-cookie", HeaderValue::from_static("a=1"));
        h.append("set-cookie", HeaderValue::from_static("b=2"));
        h.insert("x-custom", HeaderValue::from_bytes(b"\xfe bytes").unwrap());
        h.insert("empty", HeaderValue::from_static(""));
        let packed = PackedHeaders::pack(&h);
        assert_eq!(packed.len(), 5);
        assert_eq!(packed.unpack(), h);
        assert_eq!(packed.get("set-cookie"), Some(&b"a=1"[..]));
        assert_eq!(packed.get("absent"), None);
        let names: Vec<&str> = packed.iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            [
                "content-type",
                "set-cookie",
                "set-cookie",
                "x-custom",
                "empty"
            ]
        );
        let unpacked = packed.unpack();
        let value = unpacked["content-type"].as_bytes().as_ptr();
        let block = packed.block.as_ptr_range();
        assert!(block.contains(&value), "values are slices of the block");
        assert_eq!(
            PackedHeaders::pack(&HeaderMap::new()).unpack(),
            HeaderMap::new()
        );
    }
}
