//! The disk tier: a directory of stored responses with a byte budget that survives a restart
//! (Varnish's file storage forgets everything when it stops; this does not).
//!
//! # Layout
//!
//! One variant (URL, key extra, `Vary` bytes) is one file, named by a stable 64-bit hash of
//! the three (16 hex digits) and spread over up to 256 subdirectories by the hash's top byte:
//! `dir/3f/3fa01c…`. A `lock` file in `dir` is held (`flock`) while a [`DiskTier`] is open, so
//! two tiers (two processes) never share a directory. Files this module did not name are left
//! alone and not counted.
//!
//! # File format (version 1, little-endian)
//!
//! ```text
//!  0  8  magic "CAPSDISK"
//!  8  4  CRC-32 of every byte after this field (offset 12 to the end of the file)
//! 12  2  version (1)
//! 14  2  status
//! 16  4  header field count
//! 20  4  url length          24  4  key-extra length     28  4  vary length
//! 32  4  header-section length                           36  4  reserved (0)
//! 40  8  body length
//! 48  8  write sequence number (restart order)
//! 56  8  request time, unix nanoseconds (saturating)
//! 64  8  response time, unix nanoseconds (saturating)
//! 72     url, key extra, vary bytes, header fields (u16 name length, u32 value length, name,
//!        value; repeated names kept in order), body
//! ```
//!
//! # Writes
//!
//! A put writes a temporary file (`<name>.<seq>.tmp`) next to its final name and renames it
//! over the final name, so a reader or a restart sees the old object or the new one, never a
//! mix. There is **no fsync**: a process crash loses nothing (the page cache survives it), and
//! after a power loss a file the kernel had not written out is short or holds zeros — which
//! the length check at open and the checksum on every read catch, dropping it. For a cache,
//! losing a few recent objects after a power cut costs some misses; an fsync per object would
//! cost milliseconds per demotion on a real disk, every time.
//!
//! # Open
//!
//! [`DiskTier::open`] deletes leftover `.tmp` files (a crash mid-write), then reads the head of
//! every object file (72 bytes and its key): wrong magic or version, a length that does not
//! match the file (truncated), a key that does not hash to the file's name, or a non-UTF-8 key
//! drops the file. The body is not read at open — a restart of a large cache must not read all
//! of it — so the checksum over the whole record is verified on every read instead, and a file
//! that fails it is deleted then. Survivors are re-admitted to a fresh evictor in write order
//! (the sequence number), so the policy sees the oldest first; hits before the restart are not
//! recorded on disk, so recency is approximated by write order.
//!
//! # Locking
//!
//! One `Mutex` guards the index and the evictor. Writing and reading object bytes happen
//! outside it; the rename that publishes a file and the unlinks of evicted, purged and corrupt
//! files happen under it, so the index and the directory never disagree (an unlink outside
//! the lock could delete a newer file renamed into the same name meanwhile).
//!
//! # Memory per object
//!
//! The index keeps, per object, id → (URL, file size) and, per URL, its variants (inline when
//! there is one); a URL's string is stored once for all its variants. Measured as RSS growth
//! over 200 000 one-variant URLs of 41 bytes: 177 bytes per object, identical in 5 runs —
//! [`INDEX_OVERHEAD`] (136) plus the URL in its `Arc` allocation. The evictor's own per-object
//! bookkeeping comes on top and depends on the policy (with LRU, the whole tier: 241 bytes per
//! object, `cargo bench -p capstan-cache --bench memory`). A million objects: about 180 MB of
//! index for, say, 100 GB of 100 kB objects.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use crate::evict::{new_evictor, EvictionKind, Evictor, ObjectId};
use crate::rfc::{CacheRules, StoredTimes, VaryKey};
use crate::store::{Entry, MAX_VARIANTS};

/// Index memory per object beyond its URL's bytes (which its variants share): the two maps'
/// slots at their load factor, the `Arc<str>` header and allocator rounding; not the evictor's
/// bookkeeping. Measured by the helper engineer's index-only run (see the module doc); the whole
/// tier per object, evictor included, by `cargo bench -p capstan-cache --bench memory`.
pub const INDEX_OVERHEAD: u64 = 136;

const MAGIC: [u8; 8] = *b"CAPSDISK";
const VERSION: u16 = 1;
const FIXED_LEN: usize = 72;
const CRC_END: usize = 12;
const LOCK_FILE: &str = "lock";
const TMP_SUFFIX: &str = ".tmp";

/// Counters since the tier was opened, and its current size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DiskStats {
    pub objects: u64,
    /// Sum of the object files' lengths (what the budget counts).
    pub bytes: u64,
    pub budget_bytes: u64,
    /// Objects written (published by rename).
    pub writes: u64,
    /// Lookups that returned an object.
    pub reads: u64,
    /// Objects deleted to keep within the budget (at open too, if the budget shrank).
    pub evictions: u64,
    /// Files deleted because they were partial, corrupt or of another version.
    pub corrupt_dropped: u64,
    /// Puts refused: over `max_object_bytes`, or declined by the policy.
    pub rejected: u64,
}

#[derive(Default)]
struct Counters {
    writes: AtomicU64,
    reads: AtomicU64,
    evictions: AtomicU64,
    corrupt_dropped: AtomicU64,
    rejected: AtomicU64,
}

fn bump(counter: &AtomicU64, by: usize) {
    counter.fetch_add(by as u64, Ordering::Relaxed);
}

/// What the index knows of one object file.
struct Meta {
    url: Arc<str>,
    size: u64,
}

/// A URL's variants, oldest first. Most URLs have one, kept inline: a `Vec` would cost a
/// 32-byte allocation per URL (a quarter of the index's memory per object).
enum Variants {
    One(ObjectId),
    Many(Vec<ObjectId>),
}

impl Variants {
    fn ids(&self) -> &[ObjectId] {
        match self {
            Variants::One(id) => std::slice::from_ref(id),
            Variants::Many(ids) => ids,
        }
    }

    fn push(&mut self, id: ObjectId) {
        match self {
            Variants::One(first) => *self = Variants::Many(vec![*first, id]),
            Variants::Many(ids) => ids.push(id),
        }
    }

    /// Removes `id`; true when no variant is left.
    fn remove(&mut self, id: ObjectId) -> bool {
        match self {
            Variants::One(only) => *only == id,
            Variants::Many(ids) => {
                ids.retain(|&v| v != id);
                match ids[..] {
                    [] => return true,
                    [only] => *self = Variants::One(only),
                    _ => {}
                }
                false
            }
        }
    }
}

struct Index {
    urls: HashMap<Arc<str>, Variants>,
    objects: HashMap<ObjectId, Meta>,
    evictor: Box<dyn Evictor>,
    bytes: u64,
}

impl Index {
    fn new(policy: EvictionKind, budget: u64) -> Index {
        Index {
            urls: HashMap::new(),
            objects: HashMap::new(),
            evictor: new_evictor(policy, budget),
            bytes: 0,
        }
    }

    /// Records an object the evictor has already admitted.
    fn insert(&mut self, id: ObjectId, url: &str, size: u64) {
        let url = match self.urls.get_key_value(url) {
            Some((shared, _)) => Arc::clone(shared),
            None => Arc::from(url),
        };
        match self.urls.get_mut(&url) {
            Some(variants) => variants.push(id),
            None => {
                self.urls.insert(Arc::clone(&url), Variants::One(id));
            }
        }
        self.objects.insert(id, Meta { url, size });
        self.bytes += size;
    }

    /// Takes an object out of the maps (not out of the evictor).
    fn take(&mut self, id: ObjectId) -> Option<Meta> {
        let meta = self.objects.remove(&id)?;
        if let Some(variants) = self.urls.get_mut(&meta.url) {
            if variants.remove(id) {
                self.urls.remove(&meta.url);
            }
        }
        self.bytes -= meta.size;
        Some(meta)
    }

    /// Takes an object out of the maps and the evictor.
    fn forget(&mut self, id: ObjectId) -> bool {
        let known = self.take(id).is_some();
        if known {
            self.evictor.remove(id);
        }
        known
    }
}

/// The disk tier. `Send + Sync`; every method blocks on the file system.
pub struct DiskTier {
    dir: PathBuf,
    budget: u64,
    max_object: u64,
    rules: CacheRules,
    index: Mutex<Index>,
    next_seq: AtomicU64,
    counters: Counters,
    /// Holds the directory's `flock` until the tier is dropped.
    _lock: File,
}

impl DiskTier {
    /// Opens (creating) `dir`, rebuilds the index from the files found there (a restart keeps
    /// every complete object; partial or corrupt files are deleted), and enforces
    /// `budget_bytes` with a fresh evictor of `policy`, objects re-admitted in write order.
    ///
    /// Fails if another `DiskTier` (in this or another process) has `dir` open, or if a file
    /// cannot be read at all (an I/O error, not bad contents: that points at the disk).
    pub fn open(
        dir: &Path,
        budget_bytes: u64,
        max_object_bytes: u64,
        policy: EvictionKind,
        rules: CacheRules,
    ) -> io::Result<DiskTier> {
        fs::create_dir_all(dir).map_err(|e| with_path(dir, e))?;
        let lock = lock_dir(dir)?;
        let tier = DiskTier {
            dir: dir.to_path_buf(),
            budget: budget_bytes,
            max_object: max_object_bytes,
            rules,
            index: Mutex::new(Index::new(policy, budget_bytes)),
            next_seq: AtomicU64::new(1),
            counters: Counters::default(),
            _lock: lock,
        };
        let mut found = tier.scan()?;
        found.sort_unstable_by_key(|f| f.seq);
        if let Some(last) = found.last() {
            tier.next_seq.store(last.seq + 1, Ordering::Relaxed);
        }
        tier.readmit(found);
        Ok(tier)
    }

    /// Writes `entry` (replacing the same variant), then deletes files as the policy says
    /// until the directory is within budget. Returns how many were evicted.
    ///
    /// An entry whose file would exceed `max_object_bytes` (or the whole budget) is refused
    /// with `InvalidInput`; one the policy declines is not stored and returns `Ok(0)` (counted
    /// in [`DiskStats::rejected`]).
    pub fn put(&self, entry: &Entry) -> io::Result<usize> {
        let id = variant_id(&entry.url, &entry.key_extra, entry.vary.as_bytes());
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let record = encode(entry, seq)?;
        let size = record.len() as u64;
        if size > self.max_object.min(self.budget) {
            bump(&self.counters.rejected, 1);
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "disk tier: object of {size} bytes exceeds the limit of {} bytes",
                    self.max_object.min(self.budget)
                ),
            ));
        }
        let tmp = self.write_temp(id, seq, &record)?;
        self.publish(id, &entry.url, size, &tmp)
    }

    /// Loads the newest variant of `url` with `key_extra` for which `vary_matches` holds,
    /// its times re-derived by [`StoredTimes::new`] under this tier's rules. A hit is told to
    /// the evictor. A file found corrupt is deleted and skipped. The entry's `id` is 0 and its
    /// `charged` the memory tier's cost, ready for [`crate::store::Store::insert`].
    pub fn lookup(
        &self,
        url: &str,
        key_extra: &str,
        vary_matches: impl Fn(&Entry) -> bool,
    ) -> io::Result<Option<Entry>> {
        let candidates: Vec<ObjectId> = match self.lock().urls.get(url) {
            Some(variants) => variants.ids().iter().rev().copied().collect(),
            None => return Ok(None),
        };
        for id in candidates {
            let Some(entry) = self.load(id, url, key_extra)? else {
                continue;
            };
            if vary_matches(&entry) {
                let mut index = self.lock();
                if index.objects.contains_key(&id) {
                    index.evictor.touch(id);
                }
                bump(&self.counters.reads, 1);
                return Ok(Some(entry));
            }
        }
        Ok(None)
    }

    /// Deletes every variant of `url`; returns how many.
    pub fn purge(&self, url: &str) -> usize {
        let mut index = self.lock();
        let ids = match index.urls.get(url) {
            Some(variants) => variants.ids().to_vec(),
            None => return 0,
        };
        self.delete_all(&mut index, &ids)
    }

    /// Deletes every object whose URL satisfies `banned`; returns how many.
    pub fn ban(&self, banned: impl Fn(&str) -> bool) -> usize {
        let mut index = self.lock();
        let ids: Vec<ObjectId> = index
            .urls
            .iter()
            .filter(|(url, _)| banned(url))
            .flat_map(|(_, variants)| variants.ids().iter().copied())
            .collect();
        self.delete_all(&mut index, &ids)
    }

    /// Deletes one variant; true when it was stored.
    pub fn remove(&self, url: &str, key_extra: &str, vary: &VaryKey) -> bool {
        let id = variant_id(url, key_extra, vary.as_bytes());
        let mut index = self.lock();
        self.delete_all(&mut index, &[id]) == 1
    }

    pub fn stats(&self) -> DiskStats {
        let (objects, bytes) = {
            let index = self.lock();
            (index.objects.len() as u64, index.bytes)
        };
        let c = &self.counters;
        DiskStats {
            objects,
            bytes,
            budget_bytes: self.budget,
            writes: c.writes.load(Ordering::Relaxed),
            reads: c.reads.load(Ordering::Relaxed),
            evictions: c.evictions.load(Ordering::Relaxed),
            corrupt_dropped: c.corrupt_dropped.load(Ordering::Relaxed),
            rejected: c.rejected.load(Ordering::Relaxed),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn lock(&self) -> MutexGuard<'_, Index> {
        // A panic under the lock can at worst leave the index out of step with the files
        // (an orphan file or a miss), which costs less than refusing to serve.
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn object_path(&self, id: ObjectId) -> PathBuf {
        self.dir
            .join(format!("{:02x}", id >> 56))
            .join(format!("{id:016x}"))
    }

    fn write_temp(&self, id: ObjectId, seq: u64, record: &[u8]) -> io::Result<PathBuf> {
        let mut tmp = self.object_path(id);
        tmp.set_extension(format!("{seq}{TMP_SUFFIX}"));
        let file = match File::create_new(&tmp) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // First object in this subdirectory.
                fs::create_dir_all(tmp.parent().unwrap_or(&self.dir))?;
                File::create_new(&tmp)
            }
            other => other,
        };
        let written = file.and_then(|mut f| f.write_all(record));
        if let Err(e) = written {
            unlink(&tmp);
            return Err(with_path(&tmp, e));
        }
        Ok(tmp)
    }

    /// Admits the written temp file and renames it into place, then evicts to the budget.
    fn publish(&self, id: ObjectId, url: &str, size: u64, tmp: &Path) -> io::Result<usize> {
        let path = self.object_path(id);
        let mut index = self.lock();
        let replacing = index.forget(id);
        let oldest = match index.urls.get(url) {
            Some(variants) if variants.ids().len() >= MAX_VARIANTS => Some(variants.ids()[0]),
            _ => None,
        };
        if let Some(oldest) = oldest {
            index.forget(oldest);
            unlink(&self.object_path(oldest));
        }
        if !index.evictor.admit(id, size, 1) {
            if replacing {
                unlink(&path);
            }
            drop(index);
            unlink(tmp);
            bump(&self.counters.rejected, 1);
            return Ok(0);
        }
        if let Err(e) = fs::rename(tmp, &path) {
            index.evictor.remove(id);
            drop(index);
            unlink(tmp);
            return Err(with_path(&path, e));
        }
        index.insert(id, url, size);
        bump(&self.counters.writes, 1);
        Ok(self.evict_to_budget(&mut index))
    }

    /// Deletes victims until the index is within budget; returns how many.
    fn evict_to_budget(&self, index: &mut Index) -> usize {
        let mut evicted = 0;
        while index.bytes > self.budget {
            let Some(victim) = index.evictor.victim() else {
                break;
            };
            if index.take(victim).is_some() {
                unlink(&self.object_path(victim));
                evicted += 1;
            }
        }
        bump(&self.counters.evictions, evicted);
        evicted
    }

    fn delete_all(&self, index: &mut Index, ids: &[ObjectId]) -> usize {
        let mut count = 0;
        for &id in ids {
            if index.forget(id) {
                unlink(&self.object_path(id));
                count += 1;
            }
        }
        count
    }

    /// Reads object `id` if it is the variant of `url` with `key_extra`; `None` if it is gone,
    /// belongs to another key (a hash collision) or is corrupt (then deleted).
    fn load(&self, id: ObjectId, url: &str, key_extra: &str) -> io::Result<Option<Entry>> {
        let path = self.object_path(id);
        let mut file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(with_path(&path, e)),
        };
        let len = file.metadata()?.len();
        let loaded = read_head(&mut file, len).and_then(|mut head| {
            if head.url != url || head.key_extra != key_extra {
                return Ok(None);
            }
            let (headers, body) = read_rest(&mut file, &mut head)?;
            self.entry_from(head, headers, body).map(Some)
        });
        match loaded {
            Ok(entry) => Ok(entry),
            Err(ReadError::Io(e)) => Err(with_path(&path, e)),
            Err(ReadError::Corrupt(_)) => {
                self.drop_corrupt(id, &file)?;
                Ok(None)
            }
        }
    }

    fn entry_from(
        &self,
        head: RecordHead,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<Entry, ReadError> {
        let vary = VaryKey::from_bytes(&head.vary)
            .map_err(|_| ReadError::Corrupt("vary key does not parse"))?;
        let request_time = from_nanos(head.fixed.request_nanos);
        let response_time = from_nanos(head.fixed.response_nanos);
        let times = StoredTimes::new(
            head.status,
            &headers,
            request_time,
            response_time,
            &self.rules,
        );
        Ok(Entry::new(
            &head.url,
            &head.key_extra,
            vary,
            head.status,
            headers,
            body,
            times,
        ))
    }

    /// Deletes the corrupt file we read, unless a put has meanwhile renamed a new one over it.
    fn drop_corrupt(&self, id: ObjectId, read: &File) -> io::Result<()> {
        let read = read.metadata()?;
        let path = self.object_path(id);
        let mut index = self.lock();
        let same_file = fs::metadata(&path)
            .map(|now| now.ino() == read.ino() && now.dev() == read.dev())
            .unwrap_or(false);
        if same_file {
            index.forget(id);
            unlink(&path);
            bump(&self.counters.corrupt_dropped, 1);
        }
        Ok(())
    }

    /// Finds the object files, deleting temp files and files that fail the head checks.
    fn scan(&self) -> io::Result<Vec<Found>> {
        let mut found = Vec::new();
        for sub in fs::read_dir(&self.dir).map_err(|e| with_path(&self.dir, e))? {
            let sub = sub?;
            let name = sub.file_name();
            let prefix = name.to_str().and_then(|n| parse_hex(n, 2));
            if let (Some(prefix), true) = (prefix, sub.file_type()?.is_dir()) {
                self.scan_subdir(&sub.path(), prefix, &mut found)?;
            }
        }
        Ok(found)
    }

    fn scan_subdir(&self, sub: &Path, prefix: u64, found: &mut Vec<Found>) -> io::Result<()> {
        for file in fs::read_dir(sub).map_err(|e| with_path(sub, e))? {
            let file = file?;
            let path = file.path();
            let Some(name) = file.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if name.ends_with(TMP_SUFFIX) {
                unlink(&path);
                continue;
            }
            let Some(id) = parse_hex(&name, 16).filter(|id| id >> 56 == prefix) else {
                continue;
            };
            if !file.file_type()?.is_file() {
                continue;
            }
            match check_file(&path, id) {
                Ok(f) => found.push(f),
                Err(ReadError::Corrupt(_)) => {
                    unlink(&path);
                    bump(&self.counters.corrupt_dropped, 1);
                }
                Err(ReadError::Io(e)) => return Err(with_path(&path, e)),
            }
        }
        Ok(())
    }

    /// Admits what the scan found, oldest write first, evicting as the budget requires.
    fn readmit(&self, found: Vec<Found>) {
        let mut index = self.lock();
        for f in found {
            if index.evictor.admit(f.id, f.size, 1) {
                index.insert(f.id, &f.url, f.size);
                self.evict_to_budget(&mut index);
            } else {
                unlink(&self.object_path(f.id));
                bump(&self.counters.rejected, 1);
            }
        }
    }
}

/// An object file that passed the head checks at open.
struct Found {
    id: ObjectId,
    seq: u64,
    size: u64,
    url: String,
}

fn check_file(path: &Path, id: ObjectId) -> Result<Found, ReadError> {
    let mut file = File::open(path)?;
    let size = file.metadata()?.len();
    let head = read_head(&mut file, size)?;
    if variant_id(&head.url, &head.key_extra, &head.vary) != id {
        return Err(ReadError::Corrupt("key does not hash to the file name"));
    }
    Ok(Found {
        id,
        seq: head.fixed.seq,
        size,
        url: head.url,
    })
}

/// Takes the directory's exclusive lock, failing at once if another tier holds it.
fn lock_dir(dir: &Path) -> io::Result<File> {
    let path = dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| with_path(&path, e))?;
    // SAFETY: flock only reads the descriptor, which `file` keeps open for the call; the lock
    // is released when `file` is closed (the tier's Drop).
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::WouldBlock {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("{}: in use by another disk tier", dir.display()),
            ));
        }
        return Err(with_path(&path, e));
    }
    Ok(file)
}

fn unlink(path: &Path) {
    // NotFound means already gone; any other failure leaves an orphan file that the next
    // open re-indexes or drops, which is all we could do about it here.
    let _ = fs::remove_file(path);
}

fn with_path(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

fn parse_hex(name: &str, digits: usize) -> Option<u64> {
    let ok = name.len() == digits && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    ok.then(|| u64::from_str_radix(name, 16).ok()).flatten()
}

/// The variant's id and file name: FNV-1a over the length-prefixed parts, then a finaliser so
/// the top byte (the subdirectory) is well mixed. Our own function rather than std's hasher,
/// whose output may change between Rust releases: the names must survive an upgrade.
fn variant_id(url: &str, key_extra: &str, vary: &[u8]) -> ObjectId {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in [url.as_bytes(), key_extra.as_bytes(), vary] {
        for &b in (part.len() as u64).to_le_bytes().iter().chain(part) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

fn to_nanos(t: SystemTime) -> u64 {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
}

fn from_nanos(nanos: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(nanos)
}

/// The fixed part of a record, after the magic and the checksum.
struct Fixed {
    status: u16,
    header_count: u32,
    url_len: u32,
    key_extra_len: u32,
    vary_len: u32,
    headers_len: u32,
    body_len: u64,
    seq: u64,
    request_nanos: u64,
    response_nanos: u64,
}

impl Fixed {
    fn key_len(&self) -> u64 {
        u64::from(self.url_len) + u64::from(self.key_extra_len) + u64::from(self.vary_len)
    }

    fn record_len(&self) -> u64 {
        // Garbage can claim a body of 2^64 bytes; saturating keeps that a mismatch, not a panic.
        (FIXED_LEN as u64 + self.key_len() + u64::from(self.headers_len))
            .saturating_add(self.body_len)
    }

    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&self.status.to_le_bytes());
        for n in [
            self.header_count,
            self.url_len,
            self.key_extra_len,
            self.vary_len,
            self.headers_len,
            0,
        ] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        for n in [
            self.body_len,
            self.seq,
            self.request_nanos,
            self.response_nanos,
        ] {
            out.extend_from_slice(&n.to_le_bytes());
        }
    }

    fn parse(b: &[u8; FIXED_LEN]) -> Result<(Fixed, u32), ReadError> {
        if b[..8] != MAGIC {
            return Err(ReadError::Corrupt("not a disk-tier object (bad magic)"));
        }
        let u16_at = |at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
        let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let u64_at = |at: usize| u64::from(u32_at(at)) | u64::from(u32_at(at + 4)) << 32;
        if u16_at(12) != VERSION {
            return Err(ReadError::Corrupt("unknown format version"));
        }
        let fixed = Fixed {
            status: u16_at(14),
            header_count: u32_at(16),
            url_len: u32_at(20),
            key_extra_len: u32_at(24),
            vary_len: u32_at(28),
            headers_len: u32_at(32),
            body_len: u64_at(40),
            seq: u64_at(48),
            request_nanos: u64_at(56),
            response_nanos: u64_at(64),
        };
        Ok((fixed, u32_at(8)))
    }
}

fn length_u32(what: &str, len: usize) -> io::Result<u32> {
    u32::try_from(len).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("disk tier: {what} of {len} bytes is too long to store"),
        )
    })
}

/// The whole file for `entry`.
fn encode(entry: &Entry, seq: u64) -> io::Result<Vec<u8>> {
    let mut fields = Vec::new();
    for (name, value) in entry.packed.iter() {
        let name = name.as_bytes();
        // Header names are short by construction; the check keeps a u16 honest anyway.
        let name_len = u16::try_from(name.len()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "disk tier: header name too long",
            )
        })?;
        fields.extend_from_slice(&name_len.to_le_bytes());
        fields.extend_from_slice(&length_u32("header value", value.len())?.to_le_bytes());
        fields.extend_from_slice(name);
        fields.extend_from_slice(value);
    }
    let vary = entry.vary.as_bytes();
    let fixed = Fixed {
        status: entry.status.as_u16(),
        header_count: length_u32("header count", entry.packed.len())?,
        url_len: length_u32("url", entry.url.len())?,
        key_extra_len: length_u32("key extra", entry.key_extra.len())?,
        vary_len: length_u32("vary key", vary.len())?,
        headers_len: length_u32("header section", fields.len())?,
        body_len: entry.body.len() as u64,
        seq,
        request_nanos: to_nanos(entry.times.request_time),
        response_nanos: to_nanos(entry.times.response_time),
    };
    let mut out = Vec::with_capacity(fixed.record_len() as usize);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[0; 4]);
    fixed.write(&mut out);
    out.extend_from_slice(entry.url.as_bytes());
    out.extend_from_slice(entry.key_extra.as_bytes());
    out.extend_from_slice(vary);
    out.extend_from_slice(&fields);
    out.extend_from_slice(&entry.body);
    let crc = crc32fast::hash(&out[CRC_END..]);
    out[8..CRC_END].copy_from_slice(&crc.to_le_bytes());
    Ok(out)
}

enum ReadError {
    Io(io::Error),
    /// Why the file is unusable (kept for debugging; the caller only counts it).
    Corrupt(#[allow(dead_code)] &'static str),
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> ReadError {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            ReadError::Corrupt("truncated")
        } else {
            ReadError::Io(e)
        }
    }
}

/// A record's fixed part and key, read without the headers and body.
struct RecordHead {
    fixed: Fixed,
    status: StatusCode,
    crc: u32,
    /// The checksum so far, over the bytes read after the checksum field.
    hasher: crc32fast::Hasher,
    url: String,
    key_extra: String,
    vary: Vec<u8>,
}

fn read_head(file: &mut File, file_len: u64) -> Result<RecordHead, ReadError> {
    let mut fixed_bytes = [0u8; FIXED_LEN];
    file.read_exact(&mut fixed_bytes)?;
    let (fixed, crc) = Fixed::parse(&fixed_bytes)?;
    if fixed.record_len() != file_len {
        return Err(ReadError::Corrupt("length does not match the file"));
    }
    let status = StatusCode::from_u16(fixed.status)
        .map_err(|_| ReadError::Corrupt("invalid status code"))?;
    // Bounded by the file's length, checked above.
    let mut key = vec![0u8; fixed.key_len() as usize];
    file.read_exact(&mut key)?;
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&fixed_bytes[CRC_END..]);
    hasher.update(&key);
    let vary = key.split_off((fixed.url_len + fixed.key_extra_len) as usize);
    let key_extra = key.split_off(fixed.url_len as usize);
    let utf8 = |b: Vec<u8>| String::from_utf8(b).map_err(|_| ReadError::Corrupt("key not UTF-8"));
    Ok(RecordHead {
        url: utf8(key)?,
        key_extra: utf8(key_extra)?,
        vary,
        fixed,
        status,
        crc,
        hasher,
    })
}

/// Reads the header fields and body, verifying the checksum over the whole record.
fn read_rest(file: &mut File, head: &mut RecordHead) -> Result<(HeaderMap, Bytes), ReadError> {
    let headers_len = head.fixed.headers_len as usize;
    let mut rest = vec![0u8; headers_len + head.fixed.body_len as usize];
    file.read_exact(&mut rest)?;
    head.hasher.update(&rest);
    if head.hasher.clone().finalize() != head.crc {
        return Err(ReadError::Corrupt("checksum mismatch"));
    }
    let headers = parse_headers(&rest[..headers_len], head.fixed.header_count)?;
    let body = Bytes::from(rest).slice(headers_len..);
    Ok((headers, body))
}

fn parse_headers(mut b: &[u8], count: u32) -> Result<HeaderMap, ReadError> {
    const BAD: &str = "malformed header section";
    let mut headers = HeaderMap::new();
    for _ in 0..count {
        let lens = split(&mut b, 6).ok_or(ReadError::Corrupt(BAD))?;
        let name_len = u16::from_le_bytes([lens[0], lens[1]]) as usize;
        let value_len = u32::from_le_bytes([lens[2], lens[3], lens[4], lens[5]]) as usize;
        let name = split(&mut b, name_len).and_then(|n| HeaderName::from_bytes(n).ok());
        let value = split(&mut b, value_len).and_then(|v| HeaderValue::from_bytes(v).ok());
        match (name, value) {
            (Some(name), Some(value)) => headers.append(name, value),
            _ => return Err(ReadError::Corrupt(BAD)),
        };
    }
    if !b.is_empty() {
        return Err(ReadError::Corrupt(BAD));
    }
    Ok(headers)
}

/// The first `n` bytes of `b`, advancing it; `None` if there are fewer.
fn split<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if b.len() < n {
        return None;
    }
    let (first, rest) = b.split_at(n);
    *b = rest;
    Some(first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A directory made for one test, removed (with everything in it) when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = std::env::temp_dir()
                .join(format!("capstan-disk-{}-{n}-{name}", std::process::id()));
            let _ = fs::remove_dir_all(&path);
            TempDir(path)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn at(secs: u64, nanos: u32) -> SystemTime {
        UNIX_EPOCH + Duration::new(secs, nanos)
    }

    /// A real `Vary: accept-encoding` key for a request sending `value` (empty: no Vary).
    fn vary_of(value: &[u8]) -> VaryKey {
        if value.is_empty() {
            return VaryKey::empty();
        }
        let mut resp = HeaderMap::new();
        resp.insert("vary", HeaderValue::from_static("accept-encoding"));
        let mut req = HeaderMap::new();
        req.insert("accept-encoding", HeaderValue::from_bytes(value).unwrap());
        crate::rfc::vary_key(&resp, &req).unwrap()
    }

    fn entry(url: &str, key_extra: &str, vary: &[u8], body: &[u8]) -> Entry {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("text/plain"));
        headers.append("set-cookie", HeaderValue::from_static("a=1"));
        headers.append("set-cookie", HeaderValue::from_static("b=2"));
        let times = StoredTimes::new(
            StatusCode::OK,
            &headers,
            at(1_700_000_000, 123_456_789),
            at(1_700_000_001, 987_654_321),
            &CacheRules::default(),
        );
        Entry::new(
            url,
            key_extra,
            vary_of(vary),
            StatusCode::OK,
            headers,
            Bytes::copy_from_slice(body),
            times,
        )
    }

    fn open(dir: &Path, budget: u64) -> DiskTier {
        DiskTier::open(
            dir,
            budget,
            budget,
            EvictionKind::Lru,
            CacheRules::default(),
        )
        .unwrap()
    }

    fn get(tier: &DiskTier, url: &str) -> Option<Entry> {
        tier.lookup(url, "", |_| true).unwrap()
    }

    fn record_len(e: &Entry) -> u64 {
        encode(e, 0).unwrap().len() as u64
    }

    fn path_of(tier: &DiskTier, url: &str, key_extra: &str, vary: &[u8]) -> PathBuf {
        tier.object_path(variant_id(url, key_extra, vary))
    }

    /// Every file under the subdirectories (objects and leftovers), with its length.
    fn files_in(dir: &Path) -> Vec<(PathBuf, u64)> {
        let mut files = Vec::new();
        for sub in fs::read_dir(dir).unwrap() {
            let sub = sub.unwrap();
            if sub.file_type().unwrap().is_dir() {
                for f in fs::read_dir(sub.path()).unwrap() {
                    let f = f.unwrap();
                    files.push((f.path(), f.metadata().unwrap().len()));
                }
            }
        }
        files
    }

    /// Deterministic bytes that are not a record (xorshift).
    fn garbage(len: usize, mut seed: u64) -> Vec<u8> {
        (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect()
    }

    #[test]
    fn put_then_lookup_returns_every_field() {
        let dir = TempDir::new("roundtrip");
        let tier = open(&dir.0, 1 << 20);
        let mut e = entry("http://h/a", "lang=en", b"gzip", b"hello body");
        e.status = StatusCode::NON_AUTHORITATIVE_INFORMATION;
        assert_eq!(tier.put(&e).unwrap(), 0);
        let got = tier
            .lookup("http://h/a", "lang=en", |_| true)
            .unwrap()
            .expect("a hit");
        assert_eq!(&*got.url, "http://h/a");
        assert_eq!(&*got.key_extra, "lang=en");
        assert_eq!(got.vary, vary_of(b"gzip"));
        assert_eq!(got.status, StatusCode::NON_AUTHORITATIVE_INFORMATION);
        assert_eq!(got.headers(), e.headers());
        assert_eq!(got.body, e.body);
        assert_eq!(got.times.request_time, e.times.request_time);
        assert_eq!(got.times.response_time, e.times.response_time);
        assert!(tier.lookup("http://h/a", "", |_| true).unwrap().is_none());
        assert!(tier
            .lookup("http://h/b", "lang=en", |_| true)
            .unwrap()
            .is_none());
        let files = files_in(&dir.0);
        let st = tier.stats();
        assert_eq!((st.objects, st.writes, st.reads), (1, 1, 1));
        assert_eq!(files.len(), 1);
        assert_eq!(st.bytes, files[0].1);
    }

    #[test]
    fn a_new_tier_on_the_same_directory_serves_objects_after_a_restart() {
        let dir = TempDir::new("restart");
        let one = record_len(&entry("http://h/0", "", b"", b"body"));
        {
            let tier = open(&dir.0, 3 * one);
            for i in 0..3 {
                tier.put(&entry(&format!("http://h/{i}"), "", b"", b"body"))
                    .unwrap();
            }
        }
        let tier = open(&dir.0, 3 * one);
        assert_eq!(tier.stats().objects, 3);
        assert_eq!(tier.stats().bytes, 3 * one);
        for i in 0..3 {
            let got = get(&tier, &format!("http://h/{i}")).expect("kept across the restart");
            assert_eq!(&got.body[..], b"body");
        }
        drop(tier);
        // Re-admitted in write order: the first written goes first; a write after the
        // restart is newer than everything from before it.
        let tier = open(&dir.0, 3 * one);
        assert_eq!(tier.put(&entry("http://h/3", "", b"", b"body")).unwrap(), 1);
        assert!(get(&tier, "http://h/0").is_none());
        drop(tier);
        let tier = open(&dir.0, 3 * one);
        assert_eq!(tier.put(&entry("http://h/4", "", b"", b"body")).unwrap(), 1);
        assert!(get(&tier, "http://h/1").is_none());
        assert!(get(&tier, "http://h/3").is_some());
    }

    #[test]
    fn the_budget_holds_and_eviction_deletes_files() {
        let dir = TempDir::new("budget");
        let one = record_len(&entry("http://h/00", "", b"", &[7; 500]));
        let budget = 5 * one;
        let tier = open(&dir.0, budget);
        let mut evicted = 0;
        for i in 0..20 {
            evicted += tier
                .put(&entry(&format!("http://h/{i:02}"), "", b"", &[7; 500]))
                .unwrap();
            let on_disk: u64 = files_in(&dir.0).iter().map(|f| f.1).sum();
            let lock = fs::metadata(dir.0.join(LOCK_FILE)).unwrap().len();
            assert!(on_disk + lock <= budget, "{on_disk} + {lock} > {budget}");
        }
        let st = tier.stats();
        assert_eq!(evicted, 15);
        assert_eq!(st.evictions, 15);
        assert_eq!(st.objects, 5);
        assert_eq!(files_in(&dir.0).len(), 5);
        assert!(get(&tier, "http://h/00").is_none());
        assert!(get(&tier, "http://h/19").is_some());
    }

    #[test]
    fn a_hit_is_told_to_the_evictor() {
        let dir = TempDir::new("touch");
        let one = record_len(&entry("http://h/0", "", b"", b"body"));
        let tier = open(&dir.0, 3 * one);
        for i in 0..3 {
            tier.put(&entry(&format!("http://h/{i}"), "", b"", b"body"))
                .unwrap();
        }
        assert!(get(&tier, "http://h/0").is_some());
        assert_eq!(tier.put(&entry("http://h/3", "", b"", b"body")).unwrap(), 1);
        assert!(
            get(&tier, "http://h/0").is_some(),
            "the recently read object stays"
        );
        assert!(get(&tier, "http://h/1").is_none());
    }

    #[test]
    fn partial_and_corrupt_files_are_dropped_at_open_and_the_rest_load() {
        let dir = TempDir::new("corrupt");
        let url = |i: usize| format!("http://h/{i}");
        let (original, truncated, garbled, empty, misnamed, tmp) = {
            let tier = open(&dir.0, 1 << 20);
            for i in 0..5 {
                tier.put(&entry(&url(i), "", b"", b"some body")).unwrap();
            }
            let truncated = path_of(&tier, &url(1), "", b"");
            let garbled = path_of(&tier, &url(2), "", b"");
            let empty = path_of(&tier, "http://h/never-stored", "", b"");
            // A valid record under a name its key does not hash to.
            let misnamed = path_of(&tier, "http://h/elsewhere", "", b"");
            let mut tmp = path_of(&tier, &url(0), "", b"");
            tmp.set_extension("99.tmp");
            (
                path_of(&tier, &url(0), "", b""),
                truncated,
                garbled,
                empty,
                misnamed,
                tmp,
            )
        };
        let len = fs::metadata(&truncated).unwrap().len();
        File::options()
            .write(true)
            .open(&truncated)
            .unwrap()
            .set_len(len / 2)
            .unwrap();
        fs::write(&garbled, garbage(len as usize, 42)).unwrap();
        for p in [&empty, &misnamed] {
            fs::create_dir_all(p.parent().unwrap()).unwrap();
        }
        fs::write(&empty, b"").unwrap();
        fs::copy(&original, &misnamed).unwrap();
        fs::write(&tmp, b"CAPSDISK half a rec").unwrap();
        fs::write(dir.0.join("notes.txt"), b"not ours").unwrap();

        let tier = open(&dir.0, 1 << 20);
        let st = tier.stats();
        assert_eq!(st.corrupt_dropped, 4, "{st:?}");
        assert_eq!(st.objects, 3);
        for gone in [&truncated, &garbled, &empty, &misnamed, &tmp] {
            assert!(!gone.exists(), "{} should be deleted", gone.display());
        }
        assert!(dir.0.join("notes.txt").exists(), "files not ours stay");
        for i in [0, 3, 4] {
            assert_eq!(
                &get(&tier, &url(i)).expect("still served").body[..],
                b"some body"
            );
        }
        assert!(get(&tier, &url(1)).is_none());
        assert!(get(&tier, &url(2)).is_none());
    }

    #[test]
    fn a_body_corrupted_while_open_fails_the_checksum_and_is_dropped() {
        let dir = TempDir::new("bitrot");
        let tier = open(&dir.0, 1 << 20);
        tier.put(&entry("http://h/a", "", b"", b"0123456789"))
            .unwrap();
        let path = path_of(&tier, "http://h/a", "", b"");
        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x20;
        fs::write(&path, &bytes).unwrap();
        assert!(get(&tier, "http://h/a").is_none());
        let st = tier.stats();
        assert_eq!((st.corrupt_dropped, st.objects, st.bytes), (1, 0, 0));
        assert!(!path.exists());
    }

    #[test]
    fn every_truncation_and_byte_flip_of_a_record_is_rejected_without_panicking() {
        let dir = TempDir::new("fuzz");
        fs::create_dir_all(&dir.0).unwrap();
        let path = dir.0.join("record");
        let record = encode(&entry("http://h/a", "k", b"v", b"body"), 1).unwrap();
        let decodes = |bytes: &[u8]| -> bool {
            fs::write(&path, bytes).unwrap();
            let mut file = File::open(&path).unwrap();
            read_head(&mut file, bytes.len() as u64)
                .and_then(|mut head| read_rest(&mut file, &mut head))
                .is_ok()
        };
        assert!(decodes(&record));
        for len in 0..record.len() {
            assert!(
                !decodes(&record[..len]),
                "a record cut at {len} bytes decoded"
            );
        }
        for at in 0..record.len() {
            let mut flipped = record.clone();
            flipped[at] ^= 0x01;
            assert!(!decodes(&flipped), "a flip at byte {at} went unnoticed");
        }
        for seed in 1..50 {
            assert!(!decodes(&garbage(record.len(), seed)));
        }
    }

    #[test]
    fn purge_and_ban_delete_files() {
        let dir = TempDir::new("purge");
        let tier = open(&dir.0, 1 << 20);
        tier.put(&entry("http://h/a", "", b"gzip", b"1")).unwrap();
        tier.put(&entry("http://h/a", "", b"br", b"2")).unwrap();
        tier.put(&entry("http://h/img/1", "", b"", b"3")).unwrap();
        tier.put(&entry("http://h/img/2", "", b"", b"4")).unwrap();
        assert_eq!(files_in(&dir.0).len(), 4);
        assert_eq!(tier.purge("http://h/a"), 2);
        assert_eq!(tier.purge("http://h/a"), 0);
        assert_eq!(files_in(&dir.0).len(), 2);
        assert_eq!(tier.ban(|url| url.starts_with("http://h/img/")), 2);
        assert!(files_in(&dir.0).is_empty());
        let st = tier.stats();
        assert_eq!((st.objects, st.bytes), (0, 0));
        assert!(get(&tier, "http://h/img/1").is_none());
    }

    #[test]
    fn variants_of_one_url_are_kept_apart() {
        let dir = TempDir::new("variants");
        let tier = open(&dir.0, 1 << 20);
        let url = "http://h/v";
        tier.put(&entry(url, "", b"gzip", b"zipped")).unwrap();
        tier.put(&entry(url, "", b"br", b"brotli")).unwrap();
        tier.put(&entry(url, "en", b"gzip", b"english")).unwrap();
        let with = |kx: &str, vary: &[u8]| {
            tier.lookup(url, kx, |e| e.vary == vary_of(vary))
                .unwrap()
                .map(|e| e.body)
        };
        assert_eq!(with("", b"gzip").unwrap(), "zipped");
        assert_eq!(with("", b"br").unwrap(), "brotli");
        assert_eq!(with("en", b"gzip").unwrap(), "english");
        assert!(with("", b"identity").is_none());
        assert_eq!(files_in(&dir.0).len(), 3);
        // The same variant again replaces its file.
        tier.put(&entry(url, "", b"gzip", b"zipped v2")).unwrap();
        assert_eq!(with("", b"gzip").unwrap(), "zipped v2");
        assert_eq!(files_in(&dir.0).len(), 3);
        assert_eq!(tier.stats().objects, 3);
        assert!(tier.remove(url, "", &vary_of(b"gzip")));
        assert!(!tier.remove(url, "", &vary_of(b"gzip")));
        assert!(with("", b"gzip").is_none());
        assert_eq!(with("", b"br").unwrap(), "brotli");
        assert_eq!(files_in(&dir.0).len(), 2);
    }

    #[test]
    fn the_variants_of_one_url_are_bounded_oldest_first() {
        let dir = TempDir::new("maxvariants");
        let tier = open(&dir.0, 1 << 20);
        for i in 0..MAX_VARIANTS + 2 {
            tier.put(&entry("http://h/v", &format!("k{i}"), b"", b"x"))
                .unwrap();
        }
        assert_eq!(tier.stats().objects as usize, MAX_VARIANTS);
        assert_eq!(files_in(&dir.0).len(), MAX_VARIANTS);
        let has = |i: usize| {
            let kx = format!("k{i}");
            tier.lookup("http://h/v", &kx, |_| true).unwrap().is_some()
        };
        assert!(!has(0) && !has(1));
        assert!((2..MAX_VARIANTS + 2).all(has));
    }

    #[test]
    fn an_object_over_max_object_is_refused() {
        let dir = TempDir::new("max");
        let tier = DiskTier::open(
            &dir.0,
            1 << 20,
            1000,
            EvictionKind::Lru,
            CacheRules::default(),
        )
        .unwrap();
        let err = tier
            .put(&entry("http://h/big", "", b"", &[0; 2000]))
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(files_in(&dir.0).is_empty());
        assert_eq!(tier.stats().rejected, 1);
        tier.put(&entry("http://h/small", "", b"", &[0; 100]))
            .unwrap();
        assert_eq!(tier.stats().objects, 1);
    }

    #[test]
    fn a_directory_in_use_is_refused_until_its_tier_is_dropped() {
        let dir = TempDir::new("lock");
        let first = open(&dir.0, 1 << 20);
        let Err(e) = DiskTier::open(
            &dir.0,
            1 << 20,
            1 << 20,
            EvictionKind::Lru,
            Default::default(),
        ) else {
            panic!("a second tier opened a directory in use");
        };
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        drop(first);
        open(&dir.0, 1 << 20);
    }

    #[test]
    fn concurrent_puts_and_lookups_keep_the_index_and_the_files_consistent() {
        let dir = TempDir::new("threads");
        let one = record_len(&entry("http://h/00", "", b"", &[0; 300]));
        let budget = 12 * one;
        let tier = open(&dir.0, budget);
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let tier = &tier;
                s.spawn(move || {
                    for j in 0..150usize {
                        let url = format!("http://h/{:02}", (j * 7 + usize::from(t)) % 30);
                        tier.put(&entry(&url, "", b"", &[t; 300])).unwrap();
                        let other = format!("http://h/{:02}", (j * 11) % 30);
                        if let Some(e) = get(tier, &other) {
                            assert_eq!(&*e.url, other);
                            assert_eq!(e.body.len(), 300);
                            assert!(e.body.iter().all(|&b| b == e.body[0]), "a mixed body");
                        }
                    }
                });
            }
        });
        let files = files_in(&dir.0);
        assert!(
            files.iter().all(|(p, _)| p.extension().is_none()),
            "{files:?}"
        );
        let st = tier.stats();
        assert_eq!(files.len() as u64, st.objects);
        assert_eq!(files.iter().map(|f| f.1).sum::<u64>(), st.bytes);
        assert!(st.bytes <= budget);
        let urls: Vec<String> = tier.lock().urls.keys().map(|u| u.to_string()).collect();
        for url in &urls {
            assert!(get(&tier, url).is_some(), "{url} indexed but not loadable");
        }
        drop(tier);
        let tier = open(&dir.0, budget);
        assert_eq!(tier.stats().objects, st.objects);
        assert_eq!(tier.stats().corrupt_dropped, 0);
    }

    #[test]
    fn the_tier_can_be_shared_between_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<DiskTier>();
    }
}
