//! The HTTP API's errors: [`ApiError`], which every handler of idmint's own
//! routes fails with, its JSON body (`{"error": {"code", "message"}}`), the
//! mapping of issue errors to status codes, the answers to an unknown path
//! or method, and `ErrorCode`, the OpenAPI schema of every code.

use std::borrow::Cow;
use std::time::Duration;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use idmint_node::{ERROR_CODES, ErrorClass, IssueError};
use idmint_segment::SegmentError;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};

/// An error response: status, stable code, message, and a retry hint for 503s.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    retry_after: Option<Duration>,
}

impl ApiError {
    pub(super) fn new(
        status: StatusCode,
        code: &'static str,
        message: impl Into<String>,
    ) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    pub(super) fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub(super) fn unavailable(
        code: &'static str,
        message: impl Into<String>,
        after: Duration,
    ) -> ApiError {
        ApiError {
            retry_after: Some(after),
            ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, code, message)
        }
    }
}

/// Every failure's body (Tinyid's routes aside): `{"error": {"code", "message"}}`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ErrorBody {
    error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ErrorDetail {
    /// The stable code: match on it.
    #[schema(value_type = ErrorCode)]
    code: &'static str,
    /// What went wrong, naming the offending value; for people, and it may change.
    message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message,
            },
        };
        let mut response = (self.status, axum::Json(body)).into_response();
        let headers = response.headers_mut();
        if let Some(after) = self.retry_after {
            // Whole seconds, rounded up, at least 1 (RFC 9110 §10.2.3).
            let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<IssueError> for ApiError {
    fn from(e: IssueError) -> ApiError {
        let status = match e.class {
            ErrorClass::BadInput => StatusCode::BAD_REQUEST,
            ErrorClass::NotFound => StatusCode::NOT_FOUND,
            ErrorClass::Conflict => StatusCode::CONFLICT,
            ErrorClass::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorClass::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorClass::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError {
            status,
            code: e.code,
            message: e.message,
            retry_after: e.retry_after,
        }
    }
}

pub(super) fn core_error(e: idmint_core::Error) -> ApiError {
    IssueError::from(e).into()
}

pub(super) fn segment_error(e: SegmentError) -> ApiError {
    IssueError::from(e).into()
}

pub(super) fn path_error(e: PathRejection) -> ApiError {
    ApiError::bad_request("invalid_path", e.body_text())
}

pub(super) fn query_error(e: QueryRejection) -> ApiError {
    ApiError::bad_request("invalid_query", e.body_text())
}

/// The stable error codes: `ErrorDetail.code`.
pub(crate) struct ErrorCode;

impl utoipa::PartialSchema for ErrorCode {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(
                "A stable error code: each keeps its meaning for good, and the same string \
                 comes from every surface (HTTP, gRPC's `idmint-error-code`, the Redis \
                 protocol's error prefix in upper case). The enum is every code idmint has; \
                 docs/api.md marks those no HTTP route answers.",
            ))
            .enum_values(Some(ERROR_CODES.iter().copied()))
            .into()
    }
}

impl utoipa::ToSchema for ErrorCode {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("ErrorCode")
    }
}

pub(super) async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no such endpoint: {method} {}", uri.path()),
    )
}

pub(super) async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{method} is not allowed on {}", uri.path()),
    )
}
