//! The probes, answered without the access token: `GET /healthz` (the process serves HTTP)
//! and `GET /readyz` (the store accepts writes, as [`Store::health`] says). axum answers
//! `HEAD` on both too, without the body.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use tuplekv_engine::{Health, Store};

use crate::ReadMode;
use crate::app::Shared;

/// The body of a `/healthz` answer.
pub(crate) const ALIVE_BODY: &str = "ok\n";
/// The body of a `/readyz` answer when the store is ready.
pub(crate) const READY_BODY: &str = "ready\n";
const TEXT: &str = "text/plain; charset=utf-8";

/// `GET /healthz`: 200 whenever the server answers at all.
pub(crate) async fn healthz() -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, TEXT)], ALIVE_BODY).into_response()
}

/// `GET /readyz`: 200 when the store accepts writes, else 503 with the reason on one line.
/// The store is asked where its reads run (a store whose reads wait on the network is asked
/// on the blocking pool).
pub(crate) async fn readyz<S: Store + 'static>(State(state): State<Shared<S>>) -> Response {
    let health = match state.config.read_mode() {
        ReadMode::Inline => state.store.health(),
        ReadMode::BlockingPool => {
            let store = Arc::clone(&state.store);
            tokio::task::spawn_blocking(move || store.health())
                .await
                .unwrap_or_else(|e| Health::NotReady(format!("the health check failed: {e}")))
        }
    };
    readiness(&health)
}

/// The `/readyz` answer for `health`.
fn readiness(health: &Health) -> Response {
    match health {
        Health::NotReady(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, TEXT)],
            format!("not ready: {}\n", one_line(reason)),
        )
            .into_response(),
        // `Health` is non-exhaustive: a state this server does not know is served as ready
        // only if it is `Ready`.
        Health::Ready => {
            (StatusCode::OK, [(header::CONTENT_TYPE, TEXT)], READY_BODY).into_response()
        }
        _ => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, TEXT)],
            "not ready: the store reports an unknown state\n",
        )
            .into_response(),
    }
}

/// `text` with its control characters (line breaks) as spaces.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_on_several_lines_is_answered_on_one() {
        assert_eq!(one_line("disk\nfull\r\tnow"), "disk full  now");
        let res = readiness(&Health::NotReady("disk\nfull".into()));
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(readiness(&Health::Ready).status(), StatusCode::OK);
    }
}
