//! An incident's bundle: a gzip-compressed POSIX ustar archive of `incident.json` and the two
//! engine pages as kept (`page-before.prom.gz`, `page-opening.prom.gz`). The archive is small
//! and flat, so a minimal ustar writer does it without another dependency.

use std::io::{Read, Write};
use std::time::UNIX_EPOCH;

use super::incident::Incident;

/// The bundle of `incident`, whose JSON as served is `json`.
pub(super) fn write(incident: &Incident, json: &[u8]) -> Vec<u8> {
    let mtime = incident
        .opened
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut tar = Vec::new();
    append(&mut tar, "incident.json", json, mtime);
    for (name, page) in [
        ("page-before.prom.gz", &incident.page_before),
        ("page-opening.prom.gz", &incident.page_opening),
    ] {
        if let Some(page) = page {
            append(&mut tar, name, &page.gzip, mtime);
        }
    }
    if let Some(stacks) = incident.stacks_text() {
        append(&mut tar, "stacks.txt", stacks.as_bytes(), mtime);
    }
    // Two zero blocks end the archive.
    tar.extend_from_slice(&[0; 1024]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&tar).expect("writing to memory");
    gz.finish().expect("writing to memory")
}

/// One regular file: a 512-byte ustar header, then its bytes padded to 512.
fn append(tar: &mut Vec<u8>, name: &str, data: &[u8], mtime: u64) {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    octal(&mut h[100..108], 0o644);
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], data.len() as u64);
    octal(&mut h[136..148], mtime);
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    // The checksum is summed with its own field as spaces.
    h[148..156].fill(b' ');
    let sum: u64 = h.iter().map(|&b| u64::from(b)).sum();
    octal(&mut h[148..155], sum);
    tar.extend_from_slice(&h);
    tar.extend_from_slice(data);
    tar.resize(tar.len().next_multiple_of(512), 0);
}

/// `value` in octal, zero-padded, ending in NUL, filling `field`.
fn octal(field: &mut [u8], value: u64) {
    let digits = field.len() - 1;
    let text = format!("{value:0digits$o}");
    field[..digits].copy_from_slice(&text.as_bytes()[text.len() - digits..]);
    field[digits] = 0;
}

/// The `incident.json` of a bundle this module wrote; `None` for anything else.
pub(super) fn read_json(bundle: &[u8]) -> Option<Vec<u8>> {
    let mut tar = Vec::new();
    flate2::read::GzDecoder::new(bundle)
        .read_to_end(&mut tar)
        .ok()?;
    let h = tar.get(..512)?;
    let name = &h[..100];
    let size = std::str::from_utf8(&h[124..135]).ok()?;
    let size = usize::from_str_radix(size, 8).ok()?;
    (name.starts_with(b"incident.json\0") && &h[257..263] == b"ustar\0")
        .then(|| tar.get(512..512 + size).map(<[u8]>::to_vec))?
}
