//! The checks of `fracflow testbed check` that say whether this host can carry a real run, as opposed to
//! whether the testbed's tools and hosts are there (those stay in `testbed.rs`): the client NIC's MTU, the
//! hugepages the real fperf needs, and (to come) the profile's image source.

use std::path::Path;

use crate::testbed::{Finding, TestbedProfile};

/// The smallest MTU the board's link needs: its TCP stack sends 8192-byte segments, which with 20 bytes of IPv4
/// and 20 of TCP header make 8232-byte packets (docs/frac.md §2.1). The testbeds use 9000.
pub const MIN_MTU: u32 = 8232;

/// MB of hugepages one fperf process takes when `TPA_CFG` does not say (`socket-mem = 8192`, docs/frac.md §1).
pub const DEFAULT_SOCKET_MEM_MB: u64 = 8192;

/// fperf processes a fRAC run starts at once at most: mixed_workload and scalability run four (one per slot,
/// docs/frac.md §1), every other figure one.
pub const MAX_CONCURRENT_FPERF: u64 = 4;

/// The MTU of `nic`: `/sys/class/net/<nic>/mtu`, else `ip -o link show dev <nic>`.
pub fn nic_mtu(nic: &str) -> Result<u32, String> {
    // A NIC name is one path component; anything else would read some other file under /sys.
    if nic.is_empty() || nic.contains('/') || nic == "." || nic == ".." {
        return Err(format!("`{nic}` is not a network interface name"));
    }
    let sys = Path::new("/sys/class/net").join(nic).join("mtu");
    if let Ok(text) = std::fs::read_to_string(&sys)
        && let Ok(mtu) = text.trim().parse()
    {
        return Ok(mtu);
    }
    let answer = crate::process::ask("ip", &["-o", "link", "show", "dev", nic])?;
    mtu_of_ip_link(&answer.text).ok_or_else(|| {
        format!(
            "cannot read the MTU of {nic}: no {} and `ip -o link show dev {nic}` says {:?}",
            sys.display(),
            answer.text.trim()
        )
    })
}

/// The number after `mtu` in a line of `ip -o link show`.
pub fn mtu_of_ip_link(text: &str) -> Option<u32> {
    text.split_whitespace()
        .skip_while(|word| *word != "mtu")
        .nth(1)
        .and_then(|word| word.parse().ok())
}

/// The `MTU` finding for the client NIC facing the board.
pub fn mtu_finding(nic: &str) -> Finding {
    match nic_mtu(nic) {
        Ok(mtu) if mtu >= MIN_MTU => Finding::new("MTU", true, format!("{nic}: mtu {mtu}")),
        Ok(mtu) => Finding::new(
            "MTU",
            false,
            format!(
                "{nic}: found mtu {mtu}, needs ≥ {MIN_MTU} (the board sends 8192-byte TCP segments, \
                 docs/frac.md §2.1); e.g. `ip link set dev {nic} mtu 9000`"
            ),
        ),
        Err(why) => Finding::new("MTU", false, why),
    }
}

/// The hugepage figures of `/proc/meminfo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hugepages {
    pub total: u64,
    pub free: u64,
    pub page_kb: u64,
}

impl Hugepages {
    /// Reads `HugePages_Total`, `HugePages_Free` and `Hugepagesize` (kB) from meminfo's text.
    pub fn parse(meminfo: &str) -> Option<Hugepages> {
        let field = |name: &str| {
            meminfo.lines().find_map(|line| {
                let (key, value) = line.split_once(':')?;
                (key.trim() == name)
                    .then(|| value.split_whitespace().next()?.parse::<u64>().ok())
                    .flatten()
            })
        };
        Some(Hugepages {
            total: field("HugePages_Total")?,
            free: field("HugePages_Free")?,
            page_kb: field("Hugepagesize")?,
        })
    }

    /// Free hugepage memory in MB.
    pub fn free_mb(&self) -> u64 {
        self.free.saturating_mul(self.page_kb) / 1024
    }
}

/// The MB of hugepages one fperf process asks DPDK for: `socket-mem = N` in the profile's `TPA_CFG`, else 8192.
pub fn socket_mem_mb(tpa_cfg: Option<&str>) -> u64 {
    tpa_cfg
        .and_then(|cfg| {
            let after = &cfg[cfg.find("socket-mem")? + "socket-mem".len()..];
            let digits: String = after
                .trim_start_matches(|c: char| c.is_whitespace() || c == '=')
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        })
        .unwrap_or(DEFAULT_SOCKET_MEM_MB)
}

/// The `hugepages` finding, given meminfo's text: the free hugepage memory against what the most fperf
/// processes a fRAC run starts at once need. None when the profile does not measure with the real fperf (the
/// embedded client needs no hugepages).
pub fn hugepage_finding(profile: &TestbedProfile, meminfo: &str) -> Option<Finding> {
    if !profile.measures_with_fperf() {
        return None;
    }
    let per_process = socket_mem_mb(profile.client.tpa_cfg.as_deref());
    // Saturating: `socket-mem` is the profile's text, and no host has u64::MAX MB to offer anyway.
    let needed = per_process.saturating_mul(MAX_CONCURRENT_FPERF);
    let rule = format!(
        "needs {} GB: {} GB per fperf process (socket-mem {per_process}) × {MAX_CONCURRENT_FPERF} processes at \
         once (mixed_workload and scalability, one per slot)",
        gb(needed),
        gb(per_process),
    );
    let Some(pages) = Hugepages::parse(meminfo) else {
        return Some(Finding::new(
            "hugepages",
            false,
            format!("{rule}; /proc/meminfo has no HugePages_Total/HugePages_Free/Hugepagesize"),
        ));
    };
    let found = format!(
        "found {} GB free ({} of {} pages × {} MB)",
        gb(pages.free_mb()),
        pages.free,
        pages.total,
        pages.page_kb / 1024
    );
    let ready = pages.free_mb() >= needed;
    let mut detail = format!("{found}, {rule}");
    if !ready && pages.page_kb > 0 {
        let pages_needed = needed.saturating_mul(1024).div_ceil(pages.page_kb);
        detail.push_str(&format!(
            "; e.g. `echo {pages_needed} > /proc/sys/vm/nr_hugepages`"
        ));
    }
    Some(Finding::new("hugepages", ready, detail))
}

/// MB as GB with at most one decimal, for findings.
fn gb(mb: u64) -> String {
    let tenths = u128::from(mb) * 10 / 1024;
    if tenths.is_multiple_of(10) {
        format!("{}", tenths / 10)
    } else {
        format!("{}.{}", tenths / 10, tenths % 10)
    }
}

/// What this host needs for a real run of the profile beyond its tools: hugepages (when it measures with the
/// real fperf) and the image source.
pub fn real_run_findings(root: &Path, profile: &TestbedProfile, found: &mut Vec<Finding>) {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    found.extend(hugepage_finding(profile, &meminfo));
    image_source_findings(root, profile, found);
}

/// The profile's image source: present, and every pinned file verifying against its manifest.
pub fn image_source_findings(root: &Path, profile: &TestbedProfile, found: &mut Vec<Finding>) {
    let (ready, detail) = crate::images::source_finding(root, profile.kind, &profile.images());
    found.push(Finding::new("images", ready, detail));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testbed::TestbedKind;

    const MEMINFO: &str = "MemTotal:       65536000 kB\nHugePages_Total:   20000\nHugePages_Free:    \
                           15000\nHugePages_Rsvd:        0\nHugepagesize:       2048 kB\n";

    fn fperf_profile(tpa_cfg: Option<&str>) -> TestbedProfile {
        let mut profile: TestbedProfile =
            serde_saphyr::from_str("kind: real\ndevice: {addr: \"10.0.0.2:2888\"}\n")
                .expect("profile");
        profile.client.fperf = Some("/opt/libtpa/fperf".to_owned());
        profile.client.tpa_cfg = tpa_cfg.map(str::to_owned);
        profile
    }

    #[test]
    fn meminfo_hugepages_are_read() {
        let pages = Hugepages::parse(MEMINFO).expect("parses");
        assert_eq!(
            pages,
            Hugepages {
                total: 20000,
                free: 15000,
                page_kb: 2048
            }
        );
        assert_eq!(pages.free_mb(), 30000);
        assert_eq!(Hugepages::parse("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn socket_mem_comes_from_tpa_cfg_else_the_artifacts_8192() {
        assert_eq!(
            socket_mem_mb(Some("tcp {tso = 0; } dpdk { socket-mem = 4096; }")),
            4096
        );
        assert_eq!(socket_mem_mb(Some("tcp {tso = 0; }")), 8192);
        assert_eq!(socket_mem_mb(None), 8192);
    }

    #[test]
    fn a_socket_mem_beyond_any_host_is_not_ready_rather_than_an_overflow() {
        // socket-mem × 4 processes overflowed u64 (found by fuzzing); it now saturates and is simply not ready.
        let profile = fperf_profile(Some("dpdk { socket-mem = 18446744073709551615; }"));
        let finding = hugepage_finding(&profile, MEMINFO).expect("checked");
        assert!(!finding.ready, "{finding:?}");
    }

    #[test]
    fn hugepages_short_of_four_processes_are_named_with_the_rule() {
        // 15000 free 2-MB pages are 29.2 GB; four processes of 8 GB need 32.
        let finding = hugepage_finding(&fperf_profile(None), MEMINFO).expect("checked");
        assert!(!finding.ready, "{finding:?}");
        assert!(
            finding.detail.starts_with(
                "found 29.2 GB free (15000 of 20000 pages × 2 MB), needs 32 GB: 8 GB per fperf process"
            ),
            "{}",
            finding.detail
        );
        assert!(
            finding
                .detail
                .ends_with("`echo 16384 > /proc/sys/vm/nr_hugepages`"),
            "{}",
            finding.detail
        );
        let smaller =
            hugepage_finding(&fperf_profile(Some("dpdk { socket-mem = 4096; }")), MEMINFO)
                .expect("checked");
        assert!(smaller.ready, "{smaller:?}");
    }

    #[test]
    fn hugepages_are_checked_only_where_the_real_fperf_measures() {
        let mut profile = fperf_profile(None);
        profile.client.fperf = None;
        assert_eq!(hugepage_finding(&profile, MEMINFO), None);
        let mut emulated = fperf_profile(None);
        emulated.kind = TestbedKind::Emulated;
        assert_eq!(hugepage_finding(&emulated, MEMINFO), None);
        let finding = hugepage_finding(&fperf_profile(None), "").expect("checked");
        assert!(
            !finding.ready
                && finding
                    .detail
                    .contains("/proc/meminfo has no HugePages_Total"),
            "{finding:?}"
        );
    }

    #[test]
    fn the_mtu_is_read_from_ip_link_and_bad_names_are_refused() {
        let line =
            "7: veth0@if6: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP";
        assert_eq!(mtu_of_ip_link(line), Some(1500));
        assert_eq!(mtu_of_ip_link("7: veth0: <UP>"), None);
        let refused = mtu_finding("../../etc");
        assert!(
            !refused.ready && refused.detail.contains("is not a network interface name"),
            "{refused:?}"
        );
    }

    #[test]
    fn the_loopback_mtu_is_read_from_sys() {
        // `lo` exists on every Linux host; its MTU (65536 by default) is read, whatever it is.
        let mtu = nic_mtu("lo").expect("lo has an MTU");
        let finding = mtu_finding("lo");
        assert_eq!(finding.ready, mtu >= MIN_MTU, "{finding:?}");
    }
}
