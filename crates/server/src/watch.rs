//! `POST /v2/watch`: a stream of length-prefixed `WatchOutput` frames (KV Connect v3).

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use tuplekv_engine::Store;

use crate::app::{Shared, read_body};
use crate::error::ApiError;
use crate::protocol::decode_watch;
use crate::stats::Endpoint;

pub(crate) async fn watch<S: Store + 'static>(
    State(state): State<Shared<S>>,
    body: Body,
) -> Result<Response, ApiError> {
    state.stats().request(Endpoint::Watch);
    let _keys = decode_watch(&read_body(body).await?)?;
    Err(ApiError::new(
        axum::http::StatusCode::NOT_IMPLEMENTED,
        "watch: waiting for the engine's watch API",
    ))
}
