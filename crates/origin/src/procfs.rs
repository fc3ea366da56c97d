//! Parsers for the Linux files `capstan agent` samples — `/proc/stat` (CPU time), `/proc/diskstats`
//! (time each block device had I/O in flight) and `/proc/net/dev` (bytes per interface) — and
//! the utilisations between two samples. Pure: the caller reads the files and the clock.

/// CPU time of the whole machine, in clock ticks, from the `cpu` line of `/proc/stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// user + nice + system + irq + softirq + steal.
    pub busy: u64,
    /// busy + idle + iowait (guest time is already inside user and nice).
    pub total: u64,
    /// `cpuN` lines: CPUs the kernel reports.
    pub cpus: u32,
}

/// One block device's `io_ticks`: milliseconds during which it had I/O in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskTicks {
    pub name: String,
    pub io_ticks_ms: u64,
}

/// One interface's byte counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetBytes {
    pub name: String,
    pub rx: u64,
    pub tx: u64,
}

/// One reading of all three files.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    pub cpu: CpuTimes,
    pub disks: Vec<DiskTicks>,
    pub nets: Vec<NetBytes>,
}

/// Which disk and interface count, and the link's capacity.
#[derive(Debug, Clone, PartialEq)]
pub struct Select {
    /// A device name from `/proc/diskstats`; `None`: the busiest device of each tick.
    pub disk: Option<String>,
    /// An interface from `/proc/net/dev`; `None`: the busiest interface other than `lo`.
    pub net: Option<String>,
    /// Link speed in bytes per second, each direction (full duplex).
    pub link_bytes_per_s: f64,
}

/// Utilisations in [0, 1] between two samples.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Utilisation {
    pub cpu: f64,
    pub disk: f64,
    pub net: f64,
}

fn numbers<'a>(fields: impl Iterator<Item = &'a str>) -> Result<Vec<u64>, String> {
    fields
        .map(|f| {
            f.parse::<u64>()
                .map_err(|_| format!("{f:?} is not a counter"))
        })
        .collect()
}

/// Parses `/proc/stat`.
pub fn parse_stat(text: &str) -> Result<CpuTimes, String> {
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some("cpu"))
        .ok_or("/proc/stat has no `cpu` line")?;
    let v = numbers(line.split_whitespace().skip(1)).map_err(|e| format!("/proc/stat: {e}"))?;
    if v.len() < 4 {
        return Err("/proc/stat: the `cpu` line has fewer than 4 counters".into());
    }
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal guest guest_nice
    let busy = at(0) + at(1) + at(2) + at(5) + at(6) + at(7);
    let cpus = text
        .lines()
        .filter(|l| {
            l.strip_prefix("cpu")
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
        })
        .count();
    Ok(CpuTimes {
        busy,
        total: busy + at(3) + at(4),
        cpus: u32::try_from(cpus).unwrap_or(u32::MAX).max(1),
    })
}

/// Parses `/proc/diskstats` (`major minor name` then the counters; `io_ticks` is the tenth).
pub fn parse_diskstats(text: &str) -> Result<Vec<DiskTicks>, String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match (f.get(2), f.get(12)) {
                (Some(name), Some(ticks)) => Ok(DiskTicks {
                    name: name.to_string(),
                    io_ticks_ms: ticks.parse().map_err(|_| {
                        format!("/proc/diskstats: bad io_ticks {ticks:?} of {name}")
                    })?,
                }),
                _ => Err(format!("/proc/diskstats: short line {l:?}")),
            }
        })
        .collect()
}

/// Parses `/proc/net/dev` (two header lines, then `name: rx_bytes … (8 fields) tx_bytes …`).
pub fn parse_net_dev(text: &str) -> Result<Vec<NetBytes>, String> {
    text.lines()
        .skip(2)
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (name, rest) = l
                .split_once(':')
                .ok_or_else(|| format!("/proc/net/dev: no ':' in {l:?}"))?;
            let v = numbers(rest.split_whitespace()).map_err(|e| format!("/proc/net/dev: {e}"))?;
            if v.len() < 9 {
                return Err(format!("/proc/net/dev: short line {l:?}"));
            }
            Ok(NetBytes {
                name: name.trim().to_string(),
                rx: v[0],
                tx: v[8],
            })
        })
        .collect()
}

/// Devices that are memory, not disks: their "I/O" is no disk's load.
fn is_virtual_disk(name: &str) -> bool {
    ["loop", "ram", "zram"].iter().any(|p| name.starts_with(p))
}

/// Utilisations between `prev` and `cur`, taken `elapsed_s` apart.
pub fn utilisation(prev: &Sample, cur: &Sample, elapsed_s: f64, select: &Select) -> Utilisation {
    if !(elapsed_s.is_finite() && elapsed_s > 0.0) {
        return Utilisation::default();
    }
    let total = cur.cpu.total.saturating_sub(prev.cpu.total);
    let cpu = if total == 0 {
        0.0
    } else {
        cur.cpu.busy.saturating_sub(prev.cpu.busy) as f64 / total as f64
    };
    let disk_ms = |d: &DiskTicks| {
        let before = prev.disks.iter().find(|p| p.name == d.name);
        before.map_or(0, |p| d.io_ticks_ms.saturating_sub(p.io_ticks_ms))
    };
    let disk_busy_ms = cur
        .disks
        .iter()
        .filter(|d| match &select.disk {
            Some(name) => &d.name == name,
            None => !is_virtual_disk(&d.name),
        })
        .map(disk_ms)
        .max()
        .unwrap_or(0);
    let net_bytes = |n: &NetBytes| {
        let before = prev.nets.iter().find(|p| p.name == n.name);
        // A full-duplex link is as busy as its busier direction.
        before.map_or(0, |p| {
            n.rx.saturating_sub(p.rx).max(n.tx.saturating_sub(p.tx))
        })
    };
    let net_busy_bytes = cur
        .nets
        .iter()
        .filter(|n| match &select.net {
            Some(name) => &n.name == name,
            None => n.name != "lo",
        })
        .map(net_bytes)
        .max()
        .unwrap_or(0);
    Utilisation {
        cpu: cpu.clamp(0.0, 1.0),
        disk: (disk_busy_ms as f64 / (elapsed_s * 1e3)).clamp(0.0, 1.0),
        net: (net_busy_bytes as f64 / (select.link_bytes_per_s * elapsed_s)).clamp(0.0, 1.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT_A: &str = "cpu  1000 0 300 8000 100 0 50 0 0 0
cpu0 500 0 150 4000 50 0 25 0 0 0
cpu1 500 0 150 4000 50 0 25 0 0 0
intr 12345
ctxt 999
";
    // One second later on 2 CPUs at USER_HZ 100: 200 ticks, of which 60 user, 20 system, 10
    // softirq busy and 100 idle, 10 iowait.
    const STAT_B: &str = "cpu  1060 0 320 8100 110 0 60 0 0 0
cpu0 530 0 160 4050 55 0 30 0 0 0
cpu1 530 0 160 4050 55 0 30 0 0 0
";

    const DISK_A: &str = "   7       0 loop0 10 0 80 5 0 0 0 0 0 900 5 0 0 0 0 0 0
 254       0 vda 1016801 30030 35695546 1233667 135382 282565 136312328 1353407 0 176584 2673295 185620 81 76182608 75196 2091 11024
 254       1 vda1 1016000 30030 35695000 1233000 135000 282565 136312000 1353000 0 176000 2673000
 253       0 zram0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
";
    // Over 2 s: loop0 1000 ms (ignored: not a disk), vda 500 ms, vda1 400 ms.
    const DISK_B: &str = "   7       0 loop0 10 0 80 5 0 0 0 0 0 1900 5 0 0 0 0 0 0
 254       0 vda 1016901 30030 35695546 1233667 135382 282565 136312328 1353407 0 177084 2673295 185620 81 76182608 75196 2091 11024
 254       1 vda1 1016000 30030 35695000 1233000 135000 282565 136312000 1353000 0 176400 2673000
 253       0 zram0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
";

    const NET_A: &str = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 900000000 1000 0 0 0 0 0 0 900000000 1000 0 0 0 0 0 0
  eth0: 1000 10 0 0 0 0 0 0 2000 20 0 0 0 0 0 0
  eth1:5000 10 0 0 0 0 0 0 5000 20 0 0 0 0 0 0
";
    // Over 1 s: lo moves 1 GB (ignored), eth0 receives 1 MB and sends 5 MB, eth1 sends 2.5 MB.
    const NET_B: &str = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 1900000000 1000 0 0 0 0 0 0 1900000000 1000 0 0 0 0 0 0
  eth0: 1001000 10 0 0 0 0 0 0 5002000 20 0 0 0 0 0 0
  eth1:5000 10 0 0 0 0 0 0 2505000 20 0 0 0 0 0 0
";

    fn sample(stat: &str, disk: &str, net: &str) -> Sample {
        Sample {
            cpu: parse_stat(stat).unwrap(),
            disks: parse_diskstats(disk).unwrap(),
            nets: parse_net_dev(net).unwrap(),
        }
    }

    fn select(disk: Option<&str>, net: Option<&str>) -> Select {
        Select {
            disk: disk.map(str::to_string),
            net: net.map(str::to_string),
            // 100 Mbit/s.
            link_bytes_per_s: 12_500_000.0,
        }
    }

    #[test]
    fn cpu_times_from_proc_stat() {
        let a = parse_stat(STAT_A).unwrap();
        assert_eq!(
            a,
            CpuTimes {
                busy: 1350,
                total: 9450,
                cpus: 2
            }
        );
        assert!(parse_stat("intr 1\n")
            .unwrap_err()
            .contains("no `cpu` line"));
        assert!(parse_stat("cpu 1 2 x 4\n").unwrap_err().contains("\"x\""));
        assert!(parse_stat("cpu 1 2\n")
            .unwrap_err()
            .contains("fewer than 4"));
    }

    #[test]
    fn diskstats_and_net_dev_parse() {
        let d = parse_diskstats(DISK_A).unwrap();
        assert_eq!(d.len(), 4);
        assert_eq!((d[1].name.as_str(), d[1].io_ticks_ms), ("vda", 176_584));
        assert!(parse_diskstats("254 0 vda 1 2\n")
            .unwrap_err()
            .contains("short line"));
        let n = parse_net_dev(NET_A).unwrap();
        assert_eq!(
            n[2],
            NetBytes {
                name: "eth1".into(),
                rx: 5000,
                tx: 5000
            }
        );
        assert!(parse_net_dev("h\nh\neth0 1 2\n")
            .unwrap_err()
            .contains("no ':'"));
    }

    #[test]
    fn cpu_utilisation_is_busy_ticks_over_all_ticks() {
        let (a, b) = (sample(STAT_A, DISK_A, NET_A), sample(STAT_B, DISK_A, NET_A));
        let u = utilisation(&a, &b, 1.0, &select(None, None));
        // (60 + 20 + 10) / (60 + 20 + 10 + 100 + 10) = 90 / 200.
        assert!((u.cpu - 0.45).abs() < 1e-12, "{}", u.cpu);
        assert_eq!((u.disk, u.net), (0.0, 0.0));
    }

    #[test]
    fn disk_utilisation_is_io_ticks_over_elapsed_time() {
        let (a, b) = (sample(STAT_A, DISK_A, NET_A), sample(STAT_A, DISK_B, NET_A));
        // Busiest real device: vda, 500 ms of 2000 (loop0's 1000 ms is not a disk's).
        let u = utilisation(&a, &b, 2.0, &select(None, None));
        assert!((u.disk - 0.25).abs() < 1e-12, "{}", u.disk);
        let u = utilisation(&a, &b, 2.0, &select(Some("vda1"), None));
        assert!((u.disk - 0.2).abs() < 1e-12, "{}", u.disk);
        // Named explicitly, even a loop device counts.
        let u = utilisation(&a, &b, 2.0, &select(Some("loop0"), None));
        assert!((u.disk - 0.5).abs() < 1e-12, "{}", u.disk);
        assert_eq!(u.cpu, 0.0);
    }

    #[test]
    fn net_utilisation_is_the_busier_direction_over_the_link() {
        let (a, b) = (sample(STAT_A, DISK_A, NET_A), sample(STAT_A, DISK_A, NET_B));
        // eth0 sent 5 MB in 1 s on a 12.5 MB/s link; lo is not a link.
        let u = utilisation(&a, &b, 1.0, &select(None, None));
        assert!((u.net - 0.4).abs() < 1e-12, "{}", u.net);
        let u = utilisation(&a, &b, 1.0, &select(None, Some("eth1")));
        assert!((u.net - 0.2).abs() < 1e-12, "{}", u.net);
        // More than the link can carry is reported as a full link.
        let u = utilisation(&a, &b, 1.0, &select(None, Some("lo")));
        assert_eq!(u.net, 1.0);
    }

    #[test]
    fn counters_that_go_backwards_or_vanish_count_as_idle() {
        let (a, b) = (sample(STAT_B, DISK_B, NET_B), sample(STAT_A, DISK_A, NET_A));
        let u = utilisation(&a, &b, 1.0, &select(None, None));
        assert_eq!(u, Utilisation::default());
        let u = utilisation(
            &a,
            &Sample::default(),
            1.0,
            &select(Some("vda"), Some("eth0")),
        );
        assert_eq!(u, Utilisation::default());
        assert_eq!(
            utilisation(&a, &a, 0.0, &select(None, None)),
            Utilisation::default()
        );
    }
}
