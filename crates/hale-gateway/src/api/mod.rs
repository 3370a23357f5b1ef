//! Admin HTTP handlers that are thin edges over the gateway's components:
//! agents (views, pause, resume, task reset) and deployments (views, trip,
//! reset), and the dashboard page (`/`, served from assets compiled in). Each handler checks the admin scope, asks a component, and renders
//! JSON; no rule lives here.

pub mod agents;
pub mod dashboard;
pub mod deployments;
pub mod history;

use crate::state::Gateway;
use axum::Router;
use std::sync::Arc;

/// The routes of this module.
pub fn router() -> Router<Arc<Gateway>> {
    agents::router()
        .merge(deployments::router())
        .merge(history::router())
        .merge(dashboard::router())
}
