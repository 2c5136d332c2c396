//! The bodies of ID batches (`GET /v1/ids/{key}`, `GET /v1/uuid`), chosen by
//! `Accept`: little-endian binary, JSON with IDs as strings, or one ID per
//! line (`Binary` is the binary form's OpenAPI schema); and the plain text
//! of single IDs.

use std::borrow::Cow;

use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use idmint_node::config::Strategy;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};

use super::error::ApiError;
use crate::issue::{Issued, text_of, uuid_text};
use crate::state::AppState;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    Text,
    Json,
    Binary,
}

pub(super) fn negotiate(headers: &HeaderMap) -> Format {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if accept.contains("application/octet-stream") {
        Format::Binary
    } else if accept.contains("application/json") {
        Format::Json
    } else {
        Format::Text
    }
}

/// What a batch's JSON body says besides its IDs.
pub(super) enum Batch {
    /// `/v1/ids/{key}`: the key and how its IDs are made.
    Key {
        key: String,
        strategy: Strategy,
        public: bool,
    },
    /// `/v1/uuid`: the UUIDs' version.
    Uuid { version: u8 },
}

/// `GET /v1/ids/{key}`'s JSON body. Its fields are in alphabetical order,
/// as in every JSON body of idmint's own.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"count": 3, "ids": ["2", "3", "4"], "key": "order", "public": false, "strategy": "segment"}))]
pub(crate) struct IdsBody {
    /// How many IDs `ids` holds.
    count: usize,
    /// The IDs in issue order, as decimal strings (JavaScript loses integers
    /// above 2^53); a public key's in `obfuscation.format`.
    ids: Vec<String>,
    /// The key.
    key: String,
    /// Whether the IDs are obfuscated public IDs.
    public: bool,
    /// How the key's IDs are made; a client must not prefetch a
    /// `monotonic` key's IDs.
    strategy: Strategy,
}

/// `GET /v1/uuid`'s JSON body.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"count": 1, "ids": ["019ac1d4-5f3e-7b2a-9c4d-2e6f8a1b3c5d"], "version": 7}))]
pub(crate) struct UuidsBody {
    /// How many UUIDs `ids` holds.
    count: usize,
    /// The UUIDs, hyphenated, lower case.
    ids: Vec<String>,
    /// The UUIDs' version: 4 or 7.
    #[schema(minimum = 4, maximum = 7)]
    version: u8,
}

pub(super) fn render(
    state: &AppState,
    format: Format,
    batch: Batch,
    issued: Issued,
) -> Result<Response, ApiError> {
    let count = match &issued {
        Issued::Ints { values, .. } => values.len(),
        Issued::Uuids(u) => u.len(),
    };
    let strategy = match &batch {
        Batch::Key { strategy, .. } => Some(HeaderValue::from_static(strategy.name())),
        Batch::Uuid { .. } => None,
    };
    let mut response = match (format, issued) {
        (Format::Binary, Issued::Ints { values, .. }) => {
            let mut body = Vec::with_capacity(values.len() * 8);
            for v in values {
                body.extend_from_slice(&v.to_le_bytes());
            }
            binary(body)
        }
        (Format::Binary, Issued::Uuids(values)) => {
            let mut body = Vec::with_capacity(values.len() * 16);
            for v in values {
                body.extend_from_slice(&v.to_be_bytes());
            }
            binary(body)
        }
        (Format::Json, issued) => {
            let ids: Vec<String> = match issued {
                Issued::Ints { values, public } => values
                    .into_iter()
                    .map(|v| text_of(state, v, public))
                    .collect::<Result<_, _>>()?,
                Issued::Uuids(values) => values.into_iter().map(uuid_text).collect(),
            };
            let count = ids.len();
            match batch {
                Batch::Key {
                    key,
                    strategy,
                    public,
                } => axum::Json(IdsBody {
                    count,
                    ids,
                    key,
                    public,
                    strategy,
                })
                .into_response(),
                Batch::Uuid { version } => axum::Json(UuidsBody {
                    count,
                    ids,
                    version,
                })
                .into_response(),
            }
        }
        (Format::Text, issued) => {
            let mut body = String::with_capacity(count * 20);
            match issued {
                Issued::Ints { values, public } => {
                    let mut buf = itoa::Buffer::new();
                    for v in values {
                        if public {
                            body.push_str(&text_of(state, v, true)?);
                        } else {
                            body.push_str(buf.format(v));
                        }
                        body.push('\n');
                    }
                }
                Issued::Uuids(values) => {
                    for v in values {
                        body.push_str(&uuid_text(v));
                        body.push('\n');
                    }
                }
            }
            ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
        }
    };
    let headers = response.headers_mut();
    headers.insert("x-idmint-count", HeaderValue::from(count));
    if let Some(strategy) = strategy {
        headers.insert("x-idmint-strategy", strategy);
    }
    Ok(response)
}

fn binary(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/octet-stream")], body).into_response()
}

/// The content type of single IDs and text bodies.
pub(super) const TEXT_PLAIN: &str = "text/plain; charset=utf-8";

pub(super) fn plain(text: String) -> Response {
    ([(header::CONTENT_TYPE, TEXT_PLAIN)], text).into_response()
}

/// The body of `application/octet-stream` ID batches.
pub(crate) struct Binary;

impl utoipa::PartialSchema for Binary {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .content_media_type("application/octet-stream")
            .description(Some(
                "Integer IDs (public IDs too) as unsigned 64-bit little-endian integers, 8 \
                 bytes each, back to back, in issue order; UUIDs 16 bytes each in RFC 9562 \
                 byte order. The count is the length divided by 8 (or 16), also sent as \
                 `x-idmint-count`.",
            ))
            .into()
    }
}

impl utoipa::ToSchema for Binary {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Binary")
    }
}
