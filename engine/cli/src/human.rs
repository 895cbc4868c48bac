//! Numbers and paths as a person reads them on a terminal.

use std::path::Path;

/// A path relative to the project root when it lies inside it.
pub fn shown(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

pub fn seconds(seconds: f64) -> String {
    if seconds < 60.0 {
        format!("{seconds:.1}s")
    } else if seconds < 3600.0 {
        format!(
            "{}m{:02}s",
            (seconds / 60.0) as u64,
            (seconds % 60.0) as u64
        )
    } else {
        format!(
            "{}h{:02}m",
            (seconds / 3600.0) as u64,
            ((seconds % 3600.0) / 60.0) as u64
        )
    }
}

pub fn bytes(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes() {
        assert_eq!(seconds(3.25), "3.2s");
        assert_eq!(seconds(125.0), "2m05s");
        assert_eq!(seconds(7260.0), "2h01m");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
    }

    #[test]
    fn paths_inside_the_root_are_shown_relative() {
        assert_eq!(
            shown(Path::new("/p"), Path::new("/p/results/x")),
            "results/x"
        );
        assert_eq!(shown(Path::new("/p"), Path::new("/q/x")), "/q/x");
    }
}
