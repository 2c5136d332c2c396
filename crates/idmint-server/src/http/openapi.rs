//! The OpenAPI 3.1 document of the HTTP API, served at `GET /openapi.json`
//! with no token.
//!
//! utoipa generates it from the code: each handler's `#[utoipa::path]`
//! (path, parameters with their constraints, request body, responses with
//! their content types and headers, security) and each body type's
//! `ToSchema` derive (the very structs the handlers serialize). [`ApiDoc`]
//! lists the handlers. Nothing here repeats a route by hand: a route the
//! router has and [`ApiDoc`] lacks, or the other way round, fails
//! `crates/idmint/tests/it/api_doc.rs`, which reads the router's `.route(`
//! calls and this server's `/openapi.json`; `serve_openapi.rs` there
//! validates the document with an independent validator, asks every
//! documented operation of a real server and drives a client generated from
//! the document.
//!
//! The two routes `http/conn.rs` answers before the router are the router's
//! own paths (`/api/{snowflake,segment}/get/{key}`), so they are in the
//! document as the router's.
//!
//! The document is built once per server ([`document_json`]), with the
//! server's `server.max_count` as the `maximum` of every `count`, and each
//! request for it is a reference-counted copy of those bytes.

use axum::body::Bytes;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::schema::Schema;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{InfoBuilder, LicenseBuilder, OpenApi as Document, RefOr, ServerBuilder};
use utoipa::{Modify, OpenApi};

use super::error::{ErrorBody, ErrorCode};

/// The security scheme of the admin routes: `server.admin_token`.
pub(crate) const ADMIN_TOKEN: &str = "admin_token";
/// A key's token (`keys.<name>.token`) as `Authorization: Bearer`.
pub(crate) const KEY_TOKEN: &str = "key_token";
/// A key's token as `?token=`.
pub(crate) const KEY_TOKEN_QUERY: &str = "key_token_query";

/// Every route, by its handler.
#[derive(OpenApi)]
#[openapi(
    paths(
        super::leaf::leaf_snowflake,
        super::leaf::leaf_segment,
        super::leaf::leaf_decode,
        super::v1::ids,
        super::v1::decode,
        super::v1::uuids,
        super::health::healthz,
        super::health::readyz,
        super::admin::admin_keys,
        super::admin::admin_create_key,
        super::admin::admin_workers,
        super::admin::admin_fleet,
        super::admin::admin_reveal,
        crate::status::page,
        crate::status::status,
        super::health::scrape,
        openapi_json,
        super::tinyid::next_id,
        super::tinyid::next_id_simple,
        super::tinyid::next_segment_id,
        super::tinyid::next_segment_id_simple,
    ),
    components(schemas(ErrorBody, ErrorCode)),
    modifiers(&Contract),
    tags(
        (name = "v1", description = "idmint's own API: IDs of any strategy, decoding, UUIDs."),
        (name = "leaf", description = "Meituan Leaf's URLs, answered as Leaf answers them."),
        (name = "tinyid", description = "Didi Tinyid's URLs, with Tinyid's bodies and codes."),
        (name = "health", description = "Liveness and readiness."),
        (name = "status", description = "The status page, its data and the metrics."),
        (name = "admin", description = "Segment keys, the worker, the fleet, revealing public IDs: behind `server.admin_token`."),
        (name = "openapi", description = "This document."),
    ),
)]
pub(crate) struct ApiDoc;

/// What the derive can't say: the info, the server, the security schemes.
struct Contract;

impl Modify for Contract {
    fn modify(&self, document: &mut Document) {
        document.info = InfoBuilder::new()
            .title("idmint")
            .version(env!("CARGO_PKG_VERSION"))
            .description(Some(
                "The HTTP API of `idmint serve`, a distributed unique-ID server: 63-bit \
                 snowflake, segment and monotonic IDs, and UUIDs. Every route and error code \
                 is described in docs/api.md of the repository.\n\n\
                 IDs in idmint's own JSON are strings (JavaScript loses integers above \
                 2^53); Tinyid's routes keep Tinyid's JSON numbers. Every failure of \
                 idmint's own routes is `{\"error\": {\"code\", \"message\"}}` with a \
                 stable `code` (the `ErrorCode` enum); a 503 carries `Retry-After`, a 401 \
                 `WWW-Authenticate: Bearer`. Any route can also answer 404 `not_found` \
                 (no such path) and 405 `method_not_allowed` (with `Allow`); a request \
                 head over 32 KiB gets 431 with no body. Every GET route also answers \
                 HEAD.",
            ))
            .license(Some(
                LicenseBuilder::new()
                    .name(env!("CARGO_PKG_LICENSE"))
                    .identifier(Some(env!("CARGO_PKG_LICENSE")))
                    .build(),
            ))
            .build();
        document.servers = Some(vec![
            ServerBuilder::new()
                .url("/")
                .description(Some(
                    "The idmint node that served this document (`server.http_addr`, \
                     127.0.0.1:8080 by default). Every node of a fleet answers the same \
                     routes; a node's IDs are unique across the fleet.",
                ))
                .build(),
        ]);
        let components = document.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            ADMIN_TOKEN,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "`Authorization: Bearer <server.admin_token>` (or \
                         `IDMINT_ADMIN_TOKEN`). Without a configured token the admin \
                         routes answer 403 `admin_disabled`; with a missing or wrong one \
                         401 `unauthorized`. `?token=` is not read there.",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            KEY_TOKEN,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A key's token, for keys with `keys.<name>.token` set only: their ID \
                         routes want `Authorization: Bearer <token>` (or `?token=`), else 401 \
                         `unauthorized`. A key without a token is open, so the ID routes \
                         list no security as one alternative. The server knows which keys \
                         have tokens; this document can't.",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            KEY_TOKEN_QUERY,
            SecurityScheme::ApiKey(ApiKey::Query(ApiKeyValue::with_description(
                "token",
                "A key's token as `?token=<token>`, the alternative to `key_token`'s \
                 header; on Tinyid's routes the `token` parameter (or form field).",
            ))),
        );
    }
}

/// The document with `max_count` as the `maximum` of every `count`
/// parameter.
pub(crate) fn document(max_count: u64) -> Document {
    use utoipa::openapi::path::{Operation, Parameter};
    let mut document = ApiDoc::openapi();
    let set_maximum = |parameter: &mut RefOr<Parameter>| {
        let RefOr::T(parameter) = parameter else {
            return;
        };
        if parameter.name != "count" {
            return;
        }
        if let Some(RefOr::T(Schema::Object(schema))) = &mut parameter.schema {
            schema.maximum = Some(max_count.into());
        }
    };
    for item in document.paths.paths.values_mut() {
        // Tinyid's routes take GET and POST alike (`method(get, post)`),
        // which utoipa writes as one operation twice: operation IDs must be
        // unique, and only a POST carries the form body.
        if let (Some(get), Some(post)) = (&mut item.get, &mut item.post)
            && get.operation_id == post.operation_id
        {
            get.request_body = None;
            post.operation_id = post.operation_id.take().map(|id| format!("{id}Post"));
        }
        let operations: [&mut Option<Operation>; 3] =
            [&mut item.get, &mut item.post, &mut item.head];
        for operation in operations.into_iter().flatten() {
            operation
                .parameters
                .iter_mut()
                .flatten()
                .for_each(set_maximum);
        }
    }
    document
}

/// [`document`] as JSON, built once per server by the router.
pub(crate) fn document_json(max_count: u64) -> Bytes {
    let json = document(max_count)
        .to_json()
        .expect("the OpenAPI document serializes");
    Bytes::from(json)
}

/// `GET /openapi.json`: the document, built once per server.
#[utoipa::path(
    get,
    path = "/openapi.json",
    operation_id = "openapi",
    tag = "openapi",
    summary = "This document: the OpenAPI 3.1 contract of the HTTP API",
    description = "Generated from the server's code; no token. Its `count` parameters' \
        `maximum` is this server's `server.max_count`.",
    responses((status = 200, description = "The document.", body = Object, content_type = "application/json")),
)]
pub(super) async fn openapi_json(document: Bytes) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], document).into_response()
}

#[cfg(test)]
mod tests {
    use idmint_node::ERROR_CODES;

    use super::*;

    #[test]
    fn every_count_parameter_has_the_servers_maximum() {
        let document: serde_json::Value =
            serde_json::from_slice(&document_json(1234)).expect("JSON");
        let mut counts = 0;
        for (path, item) in document["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                for parameter in operation["parameters"].as_array().into_iter().flatten() {
                    if parameter["name"] == "count" {
                        assert_eq!(parameter["schema"]["maximum"], 1234, "{method} {path}");
                        assert_eq!(parameter["schema"]["minimum"], 1, "{method} {path}");
                        counts += 1;
                    }
                }
            }
        }
        assert_eq!(counts, 2, "`count` of /v1/ids/{{key}} and /v1/uuid");
    }

    #[test]
    fn every_503_says_retry_after_every_401_how_and_admin_routes_want_the_token() {
        let document: serde_json::Value = serde_json::from_slice(&document_json(10)).expect("JSON");
        let mut operation_ids = std::collections::BTreeSet::new();
        for (path, item) in document["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                let id = operation["operationId"].as_str().unwrap();
                assert!(operation_ids.insert(id), "operationId {id} twice");
                let responses = operation["responses"].as_object().unwrap();
                for (status, response) in responses {
                    let headers = &response["headers"];
                    match status.as_str() {
                        "503" => assert!(
                            headers.get("Retry-After").is_some(),
                            "{method} {path}: a 503 without Retry-After"
                        ),
                        "401" => assert!(
                            headers.get("WWW-Authenticate").is_some(),
                            "{method} {path}: a 401 without WWW-Authenticate"
                        ),
                        _ => {}
                    }
                }
                let security = operation["security"].to_string();
                if path.starts_with("/v1/admin/") {
                    assert_eq!(security, r#"[{"admin_token":[]}]"#, "{method} {path}");
                    for status in ["401", "403"] {
                        assert!(
                            responses.contains_key(status),
                            "{method} {path}: no {status}"
                        );
                    }
                } else {
                    assert!(!security.contains(ADMIN_TOKEN), "{method} {path}");
                }
                if path.starts_with("/tinyid/") {
                    // GET takes the query only; POST also the form body.
                    assert_eq!(
                        operation.get("requestBody").is_some(),
                        method == "post",
                        "{method} {path}"
                    );
                }
            }
        }
        assert!(operation_ids.len() > 20, "{operation_ids:?}");
    }

    #[test]
    fn the_document_is_openapi_3_1_with_the_crates_version() {
        let document: serde_json::Value = serde_json::from_slice(&document_json(10)).expect("JSON");
        assert_eq!(document["openapi"], "3.1.0");
        assert_eq!(document["info"]["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(
            document["info"]["license"]["identifier"],
            "MIT OR Apache-2.0"
        );
        let codes = document["components"]["schemas"]["ErrorCode"]["enum"]
            .as_array()
            .unwrap();
        assert_eq!(codes.len(), ERROR_CODES.len());
    }
}
