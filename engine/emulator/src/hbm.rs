//! The emulated HBM the reconfiguration controller stages partials in: a
//! sparse map of 4 KiB pages with a byte budget, so a client writing all over
//! the 8 GiB address space cannot exhaust the host's memory.

use std::collections::HashMap;

/// Page size of the sparse map.
pub const PAGE: usize = 4096;
const PAGE_U64: u64 = PAGE as u64;

/// The write would take more pages than the budget allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("HBM budget of {budget} bytes exhausted")]
pub struct HbmFull {
    /// The budget in bytes.
    pub budget: usize,
}

/// Sparse, bounded HBM; unwritten bytes read as zero.
#[derive(Debug)]
pub struct Hbm {
    pages: HashMap<u64, Box<[u8; PAGE]>>,
    max_pages: usize,
}

impl Hbm {
    /// Empty HBM holding at most `budget` bytes (rounded up to whole pages).
    #[must_use]
    pub fn new(budget: usize) -> Hbm {
        Hbm {
            pages: HashMap::new(),
            max_pages: budget.div_ceil(PAGE),
        }
    }

    /// The budget in bytes.
    #[must_use]
    pub fn budget(&self) -> usize {
        self.max_pages * PAGE
    }

    /// Bytes currently held (whole pages).
    #[must_use]
    pub fn resident(&self) -> usize {
        self.pages.len() * PAGE
    }

    /// Forgets everything (a reprogram).
    pub fn clear(&mut self) {
        self.pages = HashMap::new();
    }

    fn page_range(addr: u64, len: usize) -> std::ops::RangeInclusive<u64> {
        let first = addr / PAGE_U64;
        let last = addr.saturating_add(len.saturating_sub(1) as u64) / PAGE_U64;
        first..=last
    }

    /// Writes `data` at `addr`, all or nothing.
    pub fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), HbmFull> {
        if data.is_empty() {
            return Ok(());
        }
        let new_pages = Hbm::page_range(addr, data.len())
            .filter(|p| !self.pages.contains_key(p))
            .count();
        if self.pages.len() + new_pages > self.max_pages {
            return Err(HbmFull {
                budget: self.budget(),
            });
        }
        let mut at = addr;
        let mut rest = data;
        while !rest.is_empty() {
            let page = at / PAGE_U64;
            // The remainder is below PAGE.
            let offset = (at % PAGE_U64) as usize;
            let n = rest.len().min(PAGE - offset);
            let buf = self
                .pages
                .entry(page)
                .or_insert_with(|| Box::new([0u8; PAGE]));
            buf[offset..offset + n].copy_from_slice(&rest[..n]);
            rest = &rest[n..];
            at = at.saturating_add(n as u64);
        }
        Ok(())
    }

    /// Reads `len` bytes at `addr` (zeros where nothing was written).
    #[must_use]
    pub fn read(&self, addr: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        let mut at = addr;
        let mut done = 0;
        while done < len {
            let page = at / PAGE_U64;
            let offset = (at % PAGE_U64) as usize;
            let n = (len - done).min(PAGE - offset);
            if let Some(buf) = self.pages.get(&page) {
                out[done..done + n].copy_from_slice(&buf[offset..offset + n]);
            }
            done += n;
            at = at.saturating_add(n as u64);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_read_across_pages_and_budget() {
        let mut hbm = Hbm::new(2 * PAGE);
        let data: Vec<u8> = (0..300u32).map(|i| i as u8).collect();
        hbm.write(PAGE_U64 - 100, &data).expect("fits in two pages");
        assert_eq!(hbm.read(PAGE_U64 - 100, 300), data);
        assert_eq!(hbm.read(0, 4), vec![0; 4]);
        assert_eq!(hbm.resident(), 2 * PAGE);
        // A third page is over budget and nothing is written.
        assert!(hbm.write(10 * PAGE_U64, &[1]).is_err());
        assert_eq!(hbm.read(10 * PAGE_U64, 1), vec![0]);
        // Rewriting held pages needs no budget.
        hbm.write(0, &[7; 8]).expect("page 0 is held");
        hbm.clear();
        assert_eq!(hbm.resident(), 0);
    }
}
