//! The admin API's plain replies: text and JSON bodies with their content type.

use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use serde::Serialize;

use crate::pipeline::response::ResponseBody;

/// A `200` with `body` of `content_type`.
pub(crate) fn text(content_type: &'static str, body: String) -> Response<ResponseBody> {
    let mut resp = Response::new(ResponseBody::full(body));
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// A `200` with `value` as pretty JSON.
pub(crate) fn json<T: Serialize>(value: &T) -> Response<ResponseBody> {
    let body =
        serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    text("application/json", body + "\n")
}

/// `value` as pretty JSON, with `status`.
pub(crate) fn json_with_status<T: Serialize>(
    status: StatusCode,
    value: &T,
) -> Response<ResponseBody> {
    let mut resp = json(value);
    *resp.status_mut() = status;
    resp
}
