//! Which unit answers how many bytes (`docs/frac.md` §2.5, "frac §"; `docs/tools.md` §1.8 `func_response_size`).

use crate::limits::{LINE_U32, NORM_MAX_REQUEST_BYTES};

/// A unit that can sit in a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// `top_k`: the 16 largest u32 words, one line.
    TopK,
    /// `log` (Logit): one line per data line.
    Log,
    /// `norm` (Min-Max): one line per data line, at most 256 data lines.
    Norm,
    /// `cnn`: one line of ten 16-bit class scores.
    Cnn,
    /// `pattern_slot`: echoes every line, header included.
    Pattern,
    /// `or_slot`: answers every line, header included, as all ones.
    Or,
}

impl Unit {
    /// Every unit.
    pub const ALL: [Unit; 6] = [
        Unit::TopK,
        Unit::Log,
        Unit::Norm,
        Unit::Cnn,
        Unit::Pattern,
        Unit::Or,
    ];

    /// The unit's name in the artifact (`kernels/user_krnl/apps/`).
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Unit::TopK => "top_k",
            Unit::Log => "log",
            Unit::Norm => "norm",
            Unit::Cnn => "cnn",
            Unit::Pattern => "pattern_slot",
            Unit::Or => "or_slot",
        }
    }

    /// The function id fperf, the trace and the figure scripts use
    /// (1 TOPK, 2 CNN, 3 LOGIT, 5 NORM; frac §2.7); test units have none.
    #[must_use]
    pub const fn function_id(self) -> Option<u32> {
        match self {
            Unit::TopK => Some(1),
            Unit::Cnn => Some(2),
            Unit::Log => Some(3),
            Unit::Norm => Some(5),
            Unit::Pattern | Unit::Or => None,
        }
    }

    /// The unit for a function id, if it names one.
    #[must_use]
    pub const fn from_function_id(id: u32) -> Option<Unit> {
        match id {
            1 => Some(Unit::TopK),
            2 => Some(Unit::Cnn),
            3 => Some(Unit::Log),
            5 => Some(Unit::Norm),
            _ => None,
        }
    }

    /// Bytes the unit answers to a complete request of `request_size` bytes
    /// (the declared size, header included):
    ///
    /// * `top_k`, `cnn`: 64, always (a header-only `top_k` request gets one
    ///   line of zeros);
    /// * `log`, `norm`: `request_size - 64`, so `Some(0)` for a header-only
    ///   request: the unit consumes the header and sends nothing;
    /// * `pattern_slot`, `or_slot`: `request_size`;
    /// * `None`: `norm` with more than 256 data lines never answers and takes
    ///   nothing more until reloaded.
    #[must_use]
    pub const fn response_size(self, request_size: u32) -> Option<u32> {
        match self {
            Unit::TopK | Unit::Cnn => Some(LINE_U32),
            Unit::Log => Some(request_size.saturating_sub(LINE_U32)),
            Unit::Norm if request_size > NORM_MAX_REQUEST_BYTES => None,
            Unit::Norm => Some(request_size.saturating_sub(LINE_U32)),
            Unit::Pattern | Unit::Or => Some(request_size),
        }
    }
}
