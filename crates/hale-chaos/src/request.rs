//! What a request carries into a handler, shared by the provider's handlers
//! (`server`) and the tool node's (`tools`): the header that picks a fault,
//! the header that names the fault applied, hale's compaction mark, and the
//! connection's kill switch
//! that `server`'s accept loop puts in every request's extensions. Kept below
//! both so the tool node does not import the server that mounts it.

use std::sync::Arc;

use tokio::sync::Notify;

/// The request header that overrides the model name as fault selector.
pub const FAULT_HEADER: &str = "x-chaos-fault";

/// The response header naming the fault that was applied.
pub const APPLIED_HEADER: &str = "x-chaos-applied";

/// The request header hale sets on its own compaction requests (its
/// summariser calls): such a request is answered with a summary whatever
/// the model or task, and no other is (a prompt that merely mentions
/// summarising is not hale's compaction). The same name as
/// `hale_gateway::upstream::COMPACTION_HEADER`.
pub const COMPACTION_HEADER: &str = "x-hale-compaction";

/// A connection's kill switch, put in every request's extensions.
#[derive(Clone)]
pub(crate) struct ConnKill(pub(crate) Arc<Notify>);
