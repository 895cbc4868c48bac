//! On-disk formats of fracflow: run manifests, event lines, cache entries, and the atomic write they share.
