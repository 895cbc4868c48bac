//! The remote cache tier over object storage: `http(s)://` (WebDAV-style PUT/GET/HEAD, as nginx's
//! `dav_methods PUT` serves it) and `s3://` (any S3-compatible store), by the `object_store` crate, behind
//! `fracflow_core::remote::RemoteStore`.
//!
//! Credentials come from the environment or a netrc file, never from the URL: the command line is recorded
//! in every run's manifest. Every request is bounded in time and retries; errors name the store by its URL,
//! which holds no secret.

mod netrc;

use std::io::Write;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use base64::Engine as _;
use fracflow_core::remote::{RemoteError, RemoteStore};
use futures_util::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::prefix::PrefixStore;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig};
use url::Url;

/// How long one request may take, connecting included, before it counts as a failure.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Retries of a request that failed in a way worth retrying (5xx, reset), within this much time.
const MAX_RETRIES: usize = 2;
const RETRY_WINDOW: Duration = Duration::from_secs(15);

/// The variables holding an HTTP store's basic-auth credentials.
pub const USER_VARIABLE: &str = "FRACFLOW_REMOTE_CACHE_USER";
pub const PASSWORD_VARIABLE: &str = "FRACFLOW_REMOTE_CACHE_PASSWORD";

/// An object store reached through a runtime of its own (the engine is not async). The client and its
/// runtime are made on the first request: a run whose every key is a local hit never pays for them (loading the
/// system's TLS roots alone takes tens of milliseconds).
pub struct ObjectRemote {
    url: Url,
    connected: OnceLock<Result<Connected, RemoteError>>,
    shown: String,
}

struct Connected {
    store: Arc<dyn ObjectStore>,
    runtime: tokio::runtime::Runtime,
}

/// Why a remote cache URL cannot be used.
#[derive(Debug)]
pub struct OpenError(pub String);

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OpenError {}

/// The store `url` names, checked but not contacted: a store that is down shows on the first request.
pub fn open(url: &str) -> Result<ObjectRemote, OpenError> {
    let parsed = Url::parse(url).map_err(|e| OpenError(format!("`{url}` is not a URL: {e}")))?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(OpenError(format!(
            "the remote cache URL holds credentials; give them in {USER_VARIABLE} and {PASSWORD_VARIABLE} \
             or in a netrc file instead (the command line is recorded in every run's manifest)"
        )));
    }
    match parsed.scheme() {
        "http" | "https" => {}
        "s3" if parsed.host_str().is_some() => {}
        "s3" => return Err(OpenError(format!("`{url}` names no bucket"))),
        other => {
            return Err(OpenError(format!(
                "remote cache `{url}`: scheme `{other}` is not one of http, https, s3"
            )));
        }
    }
    Ok(ObjectRemote {
        url: parsed,
        connected: OnceLock::new(),
        shown: url.trim_end_matches('/').to_owned(),
    })
}

impl ObjectRemote {
    fn connected(&self) -> Result<&Connected, RemoteError> {
        self.connected
            .get_or_init(|| connect(&self.url).map_err(|e| RemoteError(e.0)))
            .as_ref()
            .map_err(Clone::clone)
    }
}

fn connect(parsed: &Url) -> Result<Connected, OpenError> {
    let url = parsed.as_str();
    let retry = RetryConfig {
        max_retries: MAX_RETRIES,
        retry_timeout: RETRY_WINDOW,
        ..RetryConfig::default()
    };
    let options = ClientOptions::new()
        .with_timeout(REQUEST_TIMEOUT)
        .with_connect_timeout(CONNECT_TIMEOUT);
    let store: Arc<dyn ObjectStore> = if parsed.scheme() == "s3" {
        let bucket = parsed.host_str().unwrap_or_default();
        // Credentials, region and endpoint (AWS_ENDPOINT for a store that is not AWS) from the
        // environment, as every S3 tool reads them.
        let store = object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .with_client_options(options.with_allow_http(true))
            .with_retry(retry)
            .build()
            .map_err(|e| OpenError(format!("remote cache {url}: {e}")))?;
        let prefix = parsed.path().trim_matches('/');
        if prefix.is_empty() {
            Arc::new(store)
        } else {
            Arc::new(PrefixStore::new(store, prefix))
        }
    } else {
        let mut options = options.with_allow_http(parsed.scheme() == "http");
        if let Some(header) = basic_auth(parsed)? {
            let mut headers = http::HeaderMap::new();
            headers.insert(http::header::AUTHORIZATION, header);
            options = options.with_default_headers(headers);
        }
        // Object paths are appended to the base URL's segments: a trailing slash would add an empty one.
        let mut base = parsed.clone();
        base.set_path(parsed.path().trim_end_matches('/'));
        Arc::new(
            object_store::http::HttpBuilder::new()
                .with_url(base.as_str())
                .with_client_options(options)
                .with_retry(retry)
                .build()
                .map_err(|e| OpenError(format!("remote cache {url}: {e}")))?,
        )
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("fracflow-remote")
        .enable_all()
        .build()
        .map_err(|e| OpenError(format!("starting the remote cache's I/O thread: {e}")))?;
    Ok(Connected { store, runtime })
}

/// `Authorization: Basic …` from the environment, else from a netrc entry for the URL's host.
fn basic_auth(url: &Url) -> Result<Option<http::HeaderValue>, OpenError> {
    let from_env = std::env::var(USER_VARIABLE)
        .ok()
        .map(|user| (user, std::env::var(PASSWORD_VARIABLE).unwrap_or_default()));
    let credentials = match from_env {
        Some(credentials) => Some(credentials),
        None => url.host_str().and_then(netrc::lookup),
    };
    let Some((user, password)) = credentials else {
        return Ok(None);
    };
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let mut header = http::HeaderValue::from_str(&format!("Basic {token}"))
        .map_err(|_| OpenError("the remote cache credentials are not valid header text".into()))?;
    // Kept out of debug output and logs.
    header.set_sensitive(true);
    Ok(Some(header))
}

/// An error of the store, in one line and bounded (a garbage answer may be long).
fn failure(error: object_store::Error) -> RemoteError {
    let said = match &error {
        object_store::Error::Unauthenticated { .. } => "the store refused the credentials (401): ",
        object_store::Error::PermissionDenied { .. } => "the store denied access (403): ",
        _ => "",
    };
    let text = format!("{said}{error}").replace('\n', " ");
    let mut end = text.len().min(300);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    RemoteError(text[..end].to_owned())
}

impl std::fmt::Debug for ObjectRemote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectRemote")
            .field("url", &self.shown)
            .finish()
    }
}

impl RemoteStore for ObjectRemote {
    fn describe(&self) -> String {
        self.shown.clone()
    }

    fn get_into(&self, path: &str, out: &mut dyn Write, limit: u64) -> Result<bool, RemoteError> {
        let location = ObjectPath::from(path);
        let Connected { store, runtime } = self.connected()?;
        runtime.block_on(async {
            let result = match store.get(&location).await {
                Ok(result) => result,
                Err(object_store::Error::NotFound { .. }) => return Ok(false),
                Err(error) => return Err(failure(error)),
            };
            if result.meta.size > limit {
                return Err(RemoteError(format!(
                    "{path}: the store holds {} bytes where at most {limit} were expected",
                    result.meta.size
                )));
            }
            let mut received = 0u64;
            let mut stream = result.into_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(failure)?;
                received += chunk.len() as u64;
                if received > limit {
                    return Err(RemoteError(format!(
                        "{path}: more than the {limit} bytes expected"
                    )));
                }
                out.write_all(&chunk)
                    .map_err(|e| RemoteError(format!("{path}: writing here: {e}")))?;
            }
            Ok(true)
        })
    }

    fn head(&self, path: &str) -> Result<Option<u64>, RemoteError> {
        let location = ObjectPath::from(path);
        let Connected { store, runtime } = self.connected()?;
        runtime.block_on(async {
            match store.head(&location).await {
                Ok(meta) => Ok(Some(meta.size)),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(error) => Err(failure(error)),
            }
        })
    }

    fn put(&self, path: &str, bytes: Vec<u8>) -> Result<(), RemoteError> {
        let location = ObjectPath::from(path);
        let Connected { store, runtime } = self.connected()?;
        runtime.block_on(async {
            store
                .put(&location, PutPayload::from(bytes))
                .await
                .map(|_| ())
                .map_err(failure)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_with_credentials_is_refused_and_says_where_they_go() {
        let Err(error) = open("http://user:secret@127.0.0.1:1/cache") else {
            panic!("a URL with credentials was accepted");
        };
        assert!(error.0.contains(USER_VARIABLE), "{error}");
        assert!(!error.0.contains("secret"), "{error}");
    }

    #[test]
    fn an_unknown_scheme_is_refused() {
        let Err(error) = open("ftp://127.0.0.1/cache") else {
            panic!("ftp was accepted");
        };
        assert!(error.0.contains("ftp"), "{error}");
    }

    #[test]
    fn a_store_that_is_not_there_fails_within_the_bounds() -> Result<(), OpenError> {
        // Port 9 on loopback: nothing listens, the connection is refused at once.
        let store = open("http://127.0.0.1:9/cache")?;
        assert!(store.head("entries/ab/x.json").is_err());
        assert_eq!(store.describe(), "http://127.0.0.1:9/cache");
        Ok(())
    }
}
