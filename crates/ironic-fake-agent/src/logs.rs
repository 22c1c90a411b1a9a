//! `log.collect_system_logs`'s payload: as IPA, the base64 of a gzipped tar archive;
//! here it holds one file, `journal.log`.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use flate2::Compression;
use flate2::write::GzEncoder;

/// The tar archive's block size.
const BLOCK: usize = 512;

/// The name of the one file in the archive.
pub(super) const JOURNAL: &str = "journal.log";

/// `journal` packed as IPA sends system logs: base64(gzip(tar)).
pub(super) fn system_logs(journal: &str) -> std::io::Result<String> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let tar = tar_one(JOURNAL, journal.as_bytes(), now);
    let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
    gz.write_all(&tar)?;
    let packed = gz.finish()?;
    Ok(base64::engine::general_purpose::STANDARD.encode(packed))
}

/// A ustar archive of one regular file modified at `mtime` (seconds since the epoch):
/// its header, its content padded to a block, and the two zero blocks that end an
/// archive. `name` must fit in 100 bytes.
fn tar_one(name: &str, content: &[u8], mtime: u64) -> Vec<u8> {
    let mut out = header(name, content.len(), mtime);
    out.extend_from_slice(content);
    out.resize(out.len().div_ceil(BLOCK) * BLOCK, 0);
    out.resize(out.len() + 2 * BLOCK, 0);
    out
}

/// The 512-byte ustar header of a regular file, mode 0644, owned by root.
fn header(name: &str, size: usize, mtime: u64) -> Vec<u8> {
    let mut h = vec![0u8; BLOCK];
    let mut put = |at: usize, bytes: &[u8]| h[at..at + bytes.len()].copy_from_slice(bytes);
    put(0, &name.as_bytes()[..name.len().min(100)]);
    put(100, b"0000644\0");
    put(108, b"0000000\0");
    put(116, b"0000000\0");
    put(124, format!("{size:011o}\0").as_bytes());
    put(136, format!("{mtime:011o}\0").as_bytes());
    // The checksum is computed with its own field as spaces.
    put(148, b"        ");
    put(156, b"0");
    put(257, b"ustar\0");
    put(263, b"00");
    put(265, b"root");
    put(297, b"root");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn the_logs_are_a_gzipped_tar_holding_the_journal() {
        let b64 = system_logs("line one\nline two\n").unwrap();
        let gz = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        let mut tar = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut tar)
            .unwrap();
        assert_eq!(tar.len(), 4 * BLOCK);
        assert_eq!(&tar[..JOURNAL.len()], JOURNAL.as_bytes());
        assert_eq!(&tar[257..263], b"ustar\0");
        // The size field, octal.
        assert_eq!(&tar[124..136], b"00000000022\0");
        assert_eq!(&tar[BLOCK..BLOCK + 18], b"line one\nline two\n");
        // The stored checksum is the sum of the header with the field as spaces.
        let mut h = tar[..BLOCK].to_vec();
        let stored = u32::from_str_radix(std::str::from_utf8(&h[148..154]).unwrap(), 8).unwrap();
        h[148..156].copy_from_slice(b"        ");
        assert_eq!(stored, h.iter().map(|b| u32::from(*b)).sum::<u32>());
        assert!(tar[2 * BLOCK..].iter().all(|b| *b == 0));
    }
}
