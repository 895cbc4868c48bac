//! Credentials from a netrc file (`$NETRC`, else `~/.netrc`): the `machine HOST login USER password PASS`
//! entries curl and git read, and a `default` entry. The format is a few whitespace-separated tokens, which
//! is why it is read here rather than through a crate; `macdef` bodies are skipped, as curl does.

use std::path::PathBuf;

/// The largest netrc file read: a credentials file is a few lines.
const MAX_NETRC_BYTES: u64 = 1 << 20;

/// The login and password for `host`, if the netrc file has them.
pub(crate) fn lookup(host: &str) -> Option<(String, String)> {
    let path = std::env::var_os("NETRC")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".netrc")))?;
    if std::fs::metadata(&path).ok()?.len() > MAX_NETRC_BYTES {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    find(&text, host)
}

/// The entry for `host` in netrc `text`, else the `default` entry.
fn find(text: &str, host: &str) -> Option<(String, String)> {
    let mut found = None;
    let mut default = None;
    let mut lines = text.lines();
    // The machine being read: Some(true) for `host`, Some(false) for another, None for `default`.
    let mut current: Option<Option<bool>> = None;
    let mut login = None;
    let mut password = None;
    let mut close = |current: Option<Option<bool>>,
                     login: &mut Option<String>,
                     password: &mut Option<String>| {
        let entry = (
            login.take().unwrap_or_default(),
            password.take().unwrap_or_default(),
        );
        match current {
            Some(Some(true)) if found.is_none() => found = Some(entry),
            Some(None) if default.is_none() => default = Some(entry),
            _ => {}
        }
    };
    while let Some(line) = lines.next() {
        let mut tokens = line.split_whitespace();
        while let Some(token) = tokens.next() {
            match token {
                "machine" => {
                    close(current, &mut login, &mut password);
                    current = Some(Some(tokens.next() == Some(host)));
                }
                "default" => {
                    close(current, &mut login, &mut password);
                    current = Some(None);
                }
                "login" => login = tokens.next().map(str::to_owned),
                "password" => password = tokens.next().map(str::to_owned),
                "account" => {
                    tokens.next();
                }
                "macdef" => {
                    // A macro runs to the next empty line.
                    for body in lines.by_ref() {
                        if body.trim().is_empty() {
                            break;
                        }
                    }
                    break;
                }
                _ => {}
            }
        }
    }
    close(current, &mut login, &mut password);
    found.or(default)
}

#[cfg(test)]
mod tests {
    use super::find;

    #[test]
    fn the_hosts_entry_wins_over_default_and_other_hosts() {
        let text = "machine other login o password op\n\
                    default login d password dp\n\
                    machine cache.lab login lab\n  password s3cret\n";
        assert_eq!(
            find(text, "cache.lab"),
            Some(("lab".into(), "s3cret".into()))
        );
        assert_eq!(find(text, "unknown"), Some(("d".into(), "dp".into())));
        assert_eq!(find("machine a login x password y", "b"), None);
    }

    #[test]
    fn macro_bodies_are_skipped() {
        let text = "macdef init\nmachine cache.lab login evil password evil\n\nmachine cache.lab login good password pw\n";
        assert_eq!(find(text, "cache.lab"), Some(("good".into(), "pw".into())));
    }
}
