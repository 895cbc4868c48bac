//! The crate's one integration-test binary (one link instead of several): figures, bad input, the report page.

mod plot {
    pub mod errors;
    pub mod figures;
    pub mod fixtures;
    pub mod report;
}
