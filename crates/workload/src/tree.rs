//! Document trees: the static content of a back-end node, generated deterministically from a
//! seed. The bytes themselves are synthesised on demand from a 64 KiB block of seeded text, so a
//! node can serve a tree without storing it, and two nodes with the same seed serve identical
//! bytes.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use rand::RngCore;
use serde::{Deserialize, Serialize};

use crate::dist::{uniform01, Dist};
use crate::filelist::{FileList, FileListEntry};
use crate::rng::{fnv1a, stream};

/// Which document tree a node serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TreeKind {
    /// WebStone 2.5 `filelist.standard` (Jones thesis, Appendix C): five files of 500 B to 5 MB
    /// at weights 350/500/140/9/1.
    #[serde(rename = "webstone")]
    Webstone,
    /// The thesis's enlarged set (§4.2): the same size mix copied to 2000 unique files, about
    /// 38 MB, each of weight 1 so the copy counts carry the mix.
    #[serde(rename = "webstone-2000")]
    Webstone2000,
    /// Web Polygraph content types (Bakhtiyari thesis §3.8.4): image, HTML, download, other.
    #[serde(rename = "polygraph")]
    Polygraph,
    /// The CAP paper's hybrid size law (Table 1): lognormal body, Pareto tail.
    #[serde(rename = "cap")]
    Cap,
    /// SWEB's files (Andresen et al., IPPS '96, §4.2), laid out as `capstan sim sweb-sizes` lays
    /// them out: `files` (default 60, ten on each of its six nodes) of sizes evenly spaced over
    /// 100 B–1.5 MB in a seeded order, file `i` at a path whose FNV-1a hash puts it on node
    /// `i % 6` (`capstan origin --partition K/6`), plus the skewed test's one 1.5 MB file,
    /// `/sweb/skewed.html`.
    #[serde(rename = "sweb")]
    Sweb,
}

impl TreeKind {
    pub const ALL: [TreeKind; 5] = [
        TreeKind::Webstone,
        TreeKind::Webstone2000,
        TreeKind::Polygraph,
        TreeKind::Cap,
        TreeKind::Sweb,
    ];

    pub fn name(&self) -> &'static str {
        match self {
            TreeKind::Webstone => "webstone",
            TreeKind::Webstone2000 => "webstone-2000",
            TreeKind::Polygraph => "polygraph",
            TreeKind::Cap => "cap",
            TreeKind::Sweb => "sweb",
        }
    }
}

impl fmt::Display for TreeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TreeKind {
    type Err = TreeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TreeKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| TreeError::UnknownKind(s.to_string()))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    #[error("unknown tree {0:?} (expected webstone, webstone-2000, polygraph, cap or sweb)")]
    UnknownKind(String),
    #[error(
        "the {0} tree has a fixed file count; `files` applies only to polygraph, cap and sweb"
    )]
    FixedCount(TreeKind),
    #[error("files must be between 1 and {max}, got {got}")]
    BadCount { got: usize, max: usize },
}

/// How an object changes over time, which decides its validators and freshness headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LifeCycle {
    /// Never modified since `modified` (Unix seconds).
    Fixed { modified: u64 },
    /// Modified every `period_s` seconds at `phase_s + k·period_s` (a Polygraph object life
    /// cycle); expires at its next modification.
    Cyclic { period_s: u64, phase_s: u64 },
}

/// Validators and freshness of an object at some moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validators {
    pub last_modified: u64,
    /// Next modification time, if known; `Expires` and `max-age` come from it.
    pub expires: Option<u64>,
    pub etag: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocFile {
    pub path: String,
    pub size: u64,
    pub weight: u64,
    pub content_type: &'static str,
    pub cachable: bool,
    pub life: LifeCycle,
    content_offset: usize,
    etag_base: u64,
}

impl DocFile {
    /// A file that is not part of a generated tree (a Polygraph URL's object), for its
    /// validators.
    pub fn synthetic(
        path: &str,
        size: u64,
        content_type: &'static str,
        cachable: bool,
        life: LifeCycle,
    ) -> DocFile {
        DocFile {
            etag_base: fnv1a(path.as_bytes()) ^ size,
            content_offset: 0,
            path: path.to_string(),
            size,
            weight: 1,
            content_type,
            cachable,
            life,
        }
    }

    /// Validators at `now` (Unix seconds).
    pub fn validators(&self, now: u64) -> Validators {
        match self.life {
            LifeCycle::Fixed { modified } => Validators {
                last_modified: modified,
                expires: None,
                etag: format!("\"{:016x}\"", self.etag_base),
            },
            LifeCycle::Cyclic { period_s, phase_s } => {
                let period = period_s.max(1);
                let k = now.saturating_sub(phase_s) / period;
                let last = if now < phase_s {
                    phase_s.saturating_sub(period)
                } else {
                    phase_s + k * period
                };
                Validators {
                    last_modified: last,
                    expires: Some(last + period),
                    etag: format!("\"{:016x}-{:x}\"", self.etag_base, last),
                }
            }
        }
    }
}

/// Unix time the WebStone and CAP trees claim as their modification time (2001-09-09), so that
/// `Last-Modified` is the same on every run.
pub const TREE_EPOCH: u64 = 1_000_000_000;

/// Size of the seeded text block every file's bytes are cut from.
pub const BLOCK_LEN: usize = 64 * 1024;

/// Largest file a generated tree may hold; heavy-tailed laws are clipped here so that one
/// unlucky draw cannot fill the disk.
pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// 64 KiB of printable, seeded text: 63 letters and a newline per line.
#[derive(Clone)]
pub struct ContentBlock {
    bytes: Vec<u8>,
}

impl fmt::Debug for ContentBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentBlock({} bytes)", self.bytes.len())
    }
}

impl ContentBlock {
    pub fn new(seed: u64) -> Self {
        let mut rng = stream(seed, "content");
        let mut bytes = Vec::with_capacity(BLOCK_LEN);
        while bytes.len() < BLOCK_LEN {
            if bytes.len() % 64 == 63 {
                bytes.push(b'\n');
            } else {
                bytes.push(b'a' + (rng.next_u32() % 26) as u8);
            }
        }
        ContentBlock { bytes }
    }
}

/// A generated document tree.
#[derive(Debug, Clone)]
pub struct DocTree {
    pub kind: TreeKind,
    pub seed: u64,
    pub files: Vec<DocFile>,
    index: HashMap<String, usize>,
    block: ContentBlock,
}

struct PolyType {
    share: f64,
    dir: &'static str,
    size: Dist,
    cachable: f64,
    /// Object life cycle length.
    life: Dist,
    /// (extension, content type, share among this type's objects)
    exts: &'static [(&'static str, &'static str, f64)],
}

const KB: f64 = 1024.0;
const DAY: f64 = 86_400.0;
const YEAR: f64 = 365.0 * DAY;

/// The Polygraph content mix and life cycles used in the Bakhtiyari thesis (§3.8.3–3.8.6:
/// `contents = [cntImage: 65%, cntHTML: 15%, cntDownload: 0.5%, cntOther]`).
fn polygraph_types() -> [PolyType; 4] {
    [
        PolyType {
            share: 0.65,
            dir: "img",
            size: Dist::Exp { mean: 4.5 * KB },
            cachable: 0.80,
            life: Dist::lognormal_mean_sd(30.0 * DAY, 7.0 * DAY),
            exts: &[
                (".gif", "image/gif", 1.0),
                (".jpeg", "image/jpeg", 1.0),
                (".png", "image/png", 1.0),
            ],
        },
        PolyType {
            share: 0.15,
            dir: "html",
            size: Dist::Exp { mean: 8.5 * KB },
            cachable: 0.90,
            life: Dist::lognormal_mean_sd(7.0 * DAY, DAY),
            exts: &[(".html", "text/html", 0.6), (".htm", "text/html", 0.4)],
        },
        PolyType {
            share: 0.005,
            dir: "dl",
            size: Dist::lognormal_mean_sd(300.0 * KB, 300.0 * KB),
            cachable: 0.95,
            life: Dist::lognormal_mean_sd(0.5 * YEAR, 30.0 * DAY),
            exts: &[
                (".exe", "application/octet-stream", 0.4),
                (".zip", "application/zip", 0.3),
                (".gz", "application/gzip", 0.3),
            ],
        },
        PolyType {
            share: 0.195,
            dir: "other",
            size: Dist::lognormal_mean_sd(25.0 * KB, 10.0 * KB),
            cachable: 0.72,
            life: Dist::Uniform {
                low: DAY,
                high: YEAR,
            },
            exts: &[(".bin", "application/octet-stream", 1.0)],
        },
    ]
}

fn pick<T>(rng: &mut impl RngCore, items: &[T], weight: impl Fn(&T) -> f64) -> usize {
    let total: f64 = items.iter().map(&weight).sum();
    let mut u = uniform01(rng) * total;
    for (i, it) in items.iter().enumerate() {
        u -= weight(it);
        if u < 0.0 {
            return i;
        }
    }
    items.len() - 1
}

fn clip_size(x: f64) -> u64 {
    (x.round() as u64).clamp(1, MAX_FILE_BYTES)
}

/// The WebStone standard file set: (name stem, size in bytes, weight).
pub const WEBSTONE_FILES: [(&str, u64, u64); 5] = [
    ("file500", 500, 350),
    ("file5k", 5125, 500),
    ("file50k", 51_250, 140),
    ("file500k", 512_500, 9),
    ("file5m", 5_248_000, 1),
];

/// SWEB §4.2: file sizes from "approximately 100 bytes" to "approximately 1.5MB".
pub const SWEB_SIZES: (u64, u64) = (100, 1_500_000);
/// The nodes SWEB's tests ran on (§4.1: six Meiko CS-2 nodes), over which the sweb tree's files
/// are dealt.
pub const SWEB_NODES: u64 = 6;
/// Files of the sweb tree unless told: ten per node (the paper does not say; the simulator's
/// choice).
pub const SWEB_FILES: usize = 60;

/// The sweb tree's path for the `j`-th file on node `home`: the first salt whose FNV-1a hash
/// (`capstan_core::hash_key`) lands on `home`, as the simulator names them.
fn sweb_path(home: u64, j: usize) -> String {
    (0u64..)
        .map(|salt| format!("/sweb/n{home}/file{j}-{salt}"))
        .find(|p| fnv1a(p.as_bytes()) % SWEB_NODES == home)
        .expect("some salt lands on every node")
}

/// The sweb tree's sizes: evenly spaced over [`SWEB_SIZES`], shuffled by the seed (the
/// simulator's order).
fn sweb_sizes(seed: u64, count: usize) -> Vec<u64> {
    let (min, max) = SWEB_SIZES;
    let mut sizes: Vec<u64> = (0..count)
        .map(|i| {
            let f = if count > 1 {
                i as f64 / (count - 1) as f64
            } else {
                1.0
            };
            (min as f64 + f * (max - min) as f64).round() as u64
        })
        .collect();
    let mut rng = stream(seed, "sweb-file-sizes");
    for i in (1..sizes.len()).rev() {
        let j = (uniform01(&mut rng) * (i + 1) as f64) as usize;
        sizes.swap(i, j.min(i));
    }
    sizes
}

/// The CAP paper's Table 1 hit-size law with the SURGE splice (see [`Dist::LogNormalPareto`]).
pub const CAP_SIZE: Dist = Dist::LogNormalPareto {
    mu: 7.640,
    sigma: 1.705,
    alpha: 1.383,
    k: 2924.0,
};

impl DocTree {
    /// Default file count for the trees whose count is a parameter (polygraph, cap): the size of
    /// the thesis's enlarged WebStone set.
    pub const DEFAULT_FILES: usize = 2000;
    pub const MAX_FILES: usize = 1_000_000;

    pub fn generate(kind: TreeKind, seed: u64, files: Option<usize>) -> Result<DocTree, TreeError> {
        if let Some(n) = files {
            if matches!(kind, TreeKind::Webstone | TreeKind::Webstone2000) {
                return Err(TreeError::FixedCount(kind));
            }
            if n == 0 || n > Self::MAX_FILES {
                return Err(TreeError::BadCount {
                    got: n,
                    max: Self::MAX_FILES,
                });
            }
        }
        let n = match kind {
            TreeKind::Sweb => files.unwrap_or(SWEB_FILES),
            _ => files.unwrap_or(Self::DEFAULT_FILES),
        };
        let fixed = |path: String, size: u64, weight: u64, ct: &'static str| DocFile {
            etag_base: fnv1a(path.as_bytes()) ^ seed.rotate_left(17) ^ size,
            content_offset: (fnv1a(path.as_bytes()) ^ seed) as usize % BLOCK_LEN,
            path,
            size,
            weight,
            content_type: ct,
            cachable: true,
            life: LifeCycle::Fixed {
                modified: TREE_EPOCH,
            },
        };
        let files: Vec<DocFile> = match kind {
            TreeKind::Webstone => WEBSTONE_FILES
                .iter()
                .map(|(stem, size, w)| fixed(format!("/{stem}.html"), *size, *w, "text/html"))
                .collect(),
            TreeKind::Webstone2000 => {
                // 2000 × weight / 1000 copies of each: 700, 1000, 280, 18, 2. The first copy keeps
                // the standard name so the standard list (and the thesis's disk_load.cgi
                // parameter, file50k.html) works on this tree too.
                let mut v = Vec::with_capacity(2000);
                for (stem, size, w) in WEBSTONE_FILES {
                    for i in 0..(w * 2) {
                        let path = if i == 0 {
                            format!("/{stem}.html")
                        } else {
                            format!("/{stem}_{i}.html")
                        };
                        v.push(fixed(path, size, 1, "text/html"));
                    }
                }
                v
            }
            TreeKind::Cap => {
                let mut rng = stream(seed, "tree-cap");
                (0..n)
                    .map(|i| {
                        let size = clip_size(CAP_SIZE.sample(&mut rng));
                        fixed(format!("/cap/obj{i:06}.html"), size, 1, "text/html")
                    })
                    .collect()
            }
            TreeKind::Sweb => {
                let mut v: Vec<DocFile> = sweb_sizes(seed, n)
                    .into_iter()
                    .enumerate()
                    .map(|(i, size)| {
                        let path = sweb_path(i as u64 % SWEB_NODES, i / SWEB_NODES as usize);
                        fixed(path, size, 1, "application/octet-stream")
                    })
                    .collect();
                v.push(fixed(
                    "/sweb/skewed.html".into(),
                    SWEB_SIZES.1,
                    0,
                    "text/html",
                ));
                v
            }
            TreeKind::Polygraph => {
                let types = polygraph_types();
                let mut rng = stream(seed, "tree-polygraph");
                (0..n)
                    .map(|i| {
                        let t = &types[pick(&mut rng, &types, |t| t.share)];
                        let (ext, ct, _) = t.exts[pick(&mut rng, t.exts, |e| e.2)];
                        let size = clip_size(t.size.sample(&mut rng));
                        let cachable = uniform01(&mut rng) < t.cachable;
                        let period = t.life.sample(&mut rng).max(1.0);
                        let phase = uniform01(&mut rng) * period;
                        let path = format!("/poly/{}/{i:06}{ext}", t.dir);
                        DocFile {
                            etag_base: fnv1a(path.as_bytes()) ^ seed.rotate_left(17) ^ size,
                            content_offset: (fnv1a(path.as_bytes()) ^ seed) as usize % BLOCK_LEN,
                            path,
                            size,
                            weight: 1,
                            content_type: ct,
                            cachable,
                            life: LifeCycle::Cyclic {
                                period_s: period.round() as u64,
                                phase_s: phase.round() as u64,
                            },
                        }
                    })
                    .collect()
            }
        };
        let index = files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.path.clone(), i))
            .collect();
        Ok(DocTree {
            kind,
            seed,
            files,
            index,
            block: ContentBlock::new(seed),
        })
    }

    pub fn get(&self, path: &str) -> Option<&DocFile> {
        self.index.get(path).map(|i| &self.files[*i])
    }

    /// Index of the file in [`DocTree::files`], for callers keeping per-file data alongside.
    pub fn position(&self, path: &str) -> Option<usize> {
        self.index.get(path).copied()
    }

    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// The file's bytes as a sequence of slices of the shared block (no copying).
    pub fn chunks<'a>(&'a self, file: &DocFile) -> impl Iterator<Item = &'a [u8]> + 'a {
        let mut offset = file.content_offset;
        let mut left = file.size as usize;
        std::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            let n = (BLOCK_LEN - offset).min(left);
            let s = &self.block.bytes[offset..offset + n];
            left -= n;
            offset = 0;
            Some(s)
        })
    }

    /// `len` bytes of the seeded block starting at `key % BLOCK_LEN` and wrapping around: the
    /// body of an object that is not a file of the tree (a Polygraph URL's object).
    pub fn synthesize(&self, key: u64, len: u64) -> Vec<u8> {
        let mut v = Vec::with_capacity(len as usize);
        let mut offset = (key % BLOCK_LEN as u64) as usize;
        while (v.len() as u64) < len {
            let n = (BLOCK_LEN - offset).min(len as usize - v.len());
            v.extend_from_slice(&self.block.bytes[offset..offset + n]);
            offset = 0;
        }
        v
    }

    /// The file's bytes in one buffer.
    pub fn content(&self, file: &DocFile) -> Vec<u8> {
        let mut v = Vec::with_capacity(file.size as usize);
        for c in self.chunks(file) {
            v.extend_from_slice(c);
        }
        v
    }

    /// The tree as a WebStone file list, sizes in the comments as in `filelist.standard`.
    pub fn filelist(&self) -> FileList {
        FileList {
            entries: self
                .files
                .iter()
                .enumerate()
                .map(|(i, f)| FileListEntry {
                    path: f.path.clone(),
                    weight: f.weight,
                    comment: Some(f.size.to_string()),
                    line: i + 1,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webstone_is_the_standard_list() {
        let t = DocTree::generate(TreeKind::Webstone, 0, None).unwrap();
        let sizes: Vec<u64> = t.files.iter().map(|f| f.size).collect();
        assert_eq!(sizes, vec![500, 5125, 51_250, 512_500, 5_248_000]);
        assert_eq!(t.filelist().total_weight(), 1000);
        assert_eq!(t.get("/file5k.html").unwrap().size, 5125);
        assert_eq!(t.content(t.get("/file5m.html").unwrap()).len(), 5_248_000);
    }

    #[test]
    fn sweb_files_are_dealt_evenly_over_six_nodes() {
        let t = DocTree::generate(TreeKind::Sweb, 1, None).unwrap();
        assert_eq!(t.files.len(), SWEB_FILES + 1);
        let mut per_node = [0; 6];
        for (i, f) in t.files[..SWEB_FILES].iter().enumerate() {
            let home = fnv1a(f.path.as_bytes()) % 6;
            assert_eq!(home, i as u64 % 6, "{}", f.path);
            assert!(f.path.starts_with(&format!("/sweb/n{home}/file{}-", i / 6)));
            per_node[home as usize] += 1;
        }
        assert_eq!(per_node, [10; 6]);
        // Evenly spaced sizes from 100 B to 1.5 MB, in some order.
        let mut sizes: Vec<u64> = t.files[..SWEB_FILES].iter().map(|f| f.size).collect();
        sizes.sort();
        assert_eq!((sizes[0], sizes[59]), (100, 1_500_000));
        assert_eq!(sizes[1] - sizes[0], 25_422); // (1.5 MB − 100 B) / 59, rounded
        let skewed = t.get("/sweb/skewed.html").unwrap();
        assert_eq!((skewed.size, skewed.weight), (1_500_000, 0));
        let other = DocTree::generate(TreeKind::Sweb, 2, Some(12)).unwrap();
        assert_eq!(other.files.len(), 13);
        assert_ne!(
            t.files[..12].iter().map(|f| f.size).collect::<Vec<_>>(),
            DocTree::generate(TreeKind::Sweb, 2, None).unwrap().files[..12]
                .iter()
                .map(|f| f.size)
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn webstone_2000_is_about_38_mb_with_the_same_mix() {
        let t = DocTree::generate(TreeKind::Webstone2000, 0, None).unwrap();
        assert_eq!(t.files.len(), 2000);
        assert_eq!(t.total_bytes(), 39_546_000); // 37.7 MiB: the thesis's "about 38 megabytes"
        let small = t.files.iter().filter(|f| f.size == 500).count();
        assert_eq!(small, 700);
        assert!(t.get("/file50k.html").is_some() && t.get("/file50k_279.html").is_some());
        assert!(DocTree::generate(TreeKind::Webstone2000, 0, Some(10)).is_err());
    }

    #[test]
    fn same_seed_same_bytes_other_seed_other_bytes() {
        for kind in TreeKind::ALL {
            let a = DocTree::generate(kind, 7, None).unwrap();
            let b = DocTree::generate(kind, 7, None).unwrap();
            let c = DocTree::generate(kind, 8, None).unwrap();
            assert_eq!(a.files, b.files, "{kind}");
            let f = &a.files[a.files.len() / 2];
            assert_eq!(a.content(f), b.content(f));
            assert_ne!(a.content(f), c.content(f), "{kind}");
        }
    }

    #[test]
    fn polygraph_mix_and_headers() {
        let t = DocTree::generate(TreeKind::Polygraph, 1, Some(20_000)).unwrap();
        let share = |dir: &str| {
            t.files
                .iter()
                .filter(|f| f.path.starts_with(&format!("/poly/{dir}/")))
                .count() as f64
                / 20_000.0
        };
        assert!((share("img") - 0.65).abs() < 0.02);
        assert!((share("html") - 0.15).abs() < 0.02);
        assert!((share("other") - 0.195).abs() < 0.02);
        let imgs: Vec<&DocFile> = t
            .files
            .iter()
            .filter(|f| f.path.starts_with("/poly/img/"))
            .collect();
        let mean = imgs.iter().map(|f| f.size as f64).sum::<f64>() / imgs.len() as f64;
        assert!((mean - 4608.0).abs() / 4608.0 < 0.05, "{mean}");
        let cach = imgs.iter().filter(|f| f.cachable).count() as f64 / imgs.len() as f64;
        assert!((cach - 0.8).abs() < 0.03, "{cach}");
        // Validators follow the life cycle: constant within a cycle, new ones after it.
        let f = imgs[0];
        let now = 1_700_000_000;
        let v = f.validators(now);
        assert!(v.last_modified <= now && v.expires.unwrap() > now);
        assert_eq!(f.validators(now + 1), v);
        let next = f.validators(v.expires.unwrap());
        assert_eq!(next.last_modified, v.expires.unwrap());
        assert_ne!(next.etag, v.etag);
    }

    #[test]
    fn cap_tree_follows_the_hybrid_law() {
        let t = DocTree::generate(TreeKind::Cap, 3, Some(50_000)).unwrap();
        let below = t.files.iter().filter(|f| f.size < 2924).count() as f64 / 50_000.0;
        assert!((below - CAP_SIZE.body_fraction()).abs() < 0.01, "{below}");
    }

    #[test]
    fn chunks_wrap_around_the_block() {
        let t = DocTree::generate(TreeKind::Webstone, 5, None).unwrap();
        let f = t.get("/file500k.html").unwrap();
        let joined: Vec<u8> = t.chunks(f).flatten().copied().collect();
        assert_eq!(joined, t.content(f));
        assert!(joined.iter().all(|b| b.is_ascii_lowercase() || *b == b'\n'));
    }

    #[test]
    fn kind_names_round_trip() {
        for k in TreeKind::ALL {
            assert_eq!(k.name().parse::<TreeKind>().unwrap(), k);
        }
        assert!("webstone2000"
            .parse::<TreeKind>()
            .unwrap_err()
            .to_string()
            .contains("expected webstone"));
    }
}
