//! Failures as PostgreSQL ERRORs: a SQLSTATE for clients that branch on
//! class, and idmint's stable code (one of `idmint_node::ERROR_CODES`) in
//! the DETAIL as `idmint error code: CODE`.

use pgrx::PgSqlErrorCode;
use pgrx::pg_sys::panic::ErrorReport;

/// A failure to report: its code, its SQLSTATE and its message.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(code: &'static str, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    /// The SQLSTATE: bad input is 22023 (invalid parameter value); a
    /// generator that can't issue now (not ready, lease lost, mark not yet
    /// persisted, clock behind) is 55000 (object not in prerequisite state),
    /// so retry later; a layout run out is 54000 (program limit exceeded);
    /// a setting that can't work is 22023 too; anything else XX000.
    fn sqlstate(&self) -> PgSqlErrorCode {
        match self.code {
            "invalid_count"
            | "invalid_id"
            | "invalid_layout"
            | "invalid_layout_text"
            | "invalid_config"
            | "registry_config"
            | "registry_unsupported"
            | "invalid_public_id"
            | "unknown_key_id"
            | "invalid_obfuscator"
            | "node_out_of_range"
            | "extension_not_preloaded" => PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            "not_ready"
            | "lease_lost"
            | "mark_reached"
            | "clock_behind"
            | "clock_behind_mark"
            | "rollback_exhausted"
            | "workers_exhausted"
            | "registry_held"
            | "registry_timeout"
            | "registry_backend"
            | "registry_unavailable"
            | "clock_skew"
            | "worker_taken"
            | "obfuscation_disabled" => PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "layout_exhausted" | "clock_before_epoch" => {
                PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED
            }
            _ => PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
        }
    }

    /// Raises the ERROR (never returns).
    pub(crate) fn raise(self, function: &'static str) -> ! {
        let detail = format!("idmint error code: {}", self.code);
        ErrorReport::new(self.sqlstate(), self.message, function)
            .set_detail(detail)
            .report(pgrx::PgLogLevel::ERROR);
        unreachable!("an ERROR report does not return")
    }
}

impl From<idmint_core::Error> for Failure {
    fn from(e: idmint_core::Error) -> Failure {
        Failure::new(e.code(), e.to_string())
    }
}
