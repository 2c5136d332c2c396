//! What a request carries, read and checked: its query parameters (each
//! name once), the key's name and token, the count, and an ID to decode.

use std::collections::HashMap;

use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use idmint_core::{Id, Layout};

use super::error::{ApiError, query_error, segment_error};
use crate::state::AppState;
use crate::tokens::constant_time_eq;

/// The query string's parameters, each name at most once: `?count=1&count=2`
/// is a 400 naming `count` (`invalid_count`), not one of the two chosen
/// silently. Other repeated names are `invalid_query`.
pub(super) struct Params(pub(super) HashMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Params, ApiError> {
        let Query(pairs) = Query::<Vec<(String, String)>>::from_request_parts(parts, state)
            .await
            .map_err(query_error)?;
        let mut params = HashMap::with_capacity(pairs.len());
        for (name, value) in pairs {
            if params.contains_key(&name) {
                let code = if name == "count" {
                    "invalid_count"
                } else {
                    "invalid_query"
                };
                let shown: String = name.chars().take(64).collect();
                return Err(ApiError::bad_request(
                    code,
                    format!("query parameter {shown:?} is given more than once: give it once"),
                ));
            }
            params.insert(name, value);
        }
        Ok(Params(params))
    }
}

/// The query parameters of a request ([`Params`]).
pub(super) type QueryParams = HashMap<String, String>;

pub(super) fn check_key(key: &str) -> Result<(), ApiError> {
    idmint_segment::validate_key(key).map_err(segment_error)
}

/// Checks `key`'s token, when it has one: `Authorization: Bearer <token>`
/// or `?token=<token>`.
pub(super) fn check_key_token(
    state: &AppState,
    key: &str,
    headers: &HeaderMap,
    params: &HashMap<String, String>,
) -> Result<(), ApiError> {
    let Some(token) = state.token_for(key) else {
        return Ok(());
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .or_else(|| params.get("token").map(String::as_str));
    match given {
        Some(given) if constant_time_eq(given.as_bytes(), token.expose().as_bytes()) => Ok(()),
        Some(_) => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            format!("wrong token for key {key:?}"),
        )),
        None => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            format!(
                "key {key:?} needs its token: send `Authorization: Bearer <token>` or `?token=<token>`"
            ),
        )),
    }
}

pub(super) fn count_of(params: &HashMap<String, String>, max: u64) -> Result<u64, ApiError> {
    match params.get("count") {
        None => Ok(1),
        Some(text) => Ok(crate::issue::parse_count(text, max)?),
    }
}

pub(super) fn decode_text(layout: &Layout, text: &str) -> Result<idmint_core::Decoded, ApiError> {
    let id: Id = text.trim().parse().map_err(|e: idmint_core::Error| {
        ApiError::bad_request("invalid_id", format!("{text:?} is not an ID: {e}"))
    })?;
    layout
        .decode(id.get())
        .map_err(|e| ApiError::bad_request("invalid_id", format!("{text:?} can't be decoded: {e}")))
}
