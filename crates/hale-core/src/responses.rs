//! The rules of the Responses API conversations hale keeps
//! (`previous_response_id`, `GET /v1/responses/{id}/input_items`).
//!
//! hale keeps each Responses answer (unless the client sent `store: false`)
//! with the turn's own input, the id it continues and the provider that
//! answered it, so a conversation that continues with `previous_response_id`
//! can be served by any deployment. Four decisions live here:
//!
//! - [`link`]: for one attempt, pass the client's `previous_response_id`
//!   through untouched (the provider holds the conversation) or send the
//!   expanded conversation (the earlier turns' inputs and outputs as input
//!   items);
//! - [`may_read`]: whose responses a caller may read or continue (the
//!   agent scope of its key, as for every other agent-owned thing);
//! - [`may_continue`]: what becomes of a `previous_response_id` a caller
//!   sends: continued from what hale keeps, forwarded as sent, or refused;
//! - [`page`]: one page of a response's input items.
//!
//! Why expansion walks a chain (each stored response holds only its own
//! input and the id it continued) and not a copy of the whole conversation
//! per response: a conversation of n turns would be stored n²/2 times over.
//! The walk is bounded by [`CHAIN_MAX`]: a longer chain is not expanded.

/// The most responses one expansion walks back (this turn's previous one
/// included). A chain longer than this, or one with a link no longer kept
/// (retention, a `DELETE`), cannot be expanded: only the deployment that
/// holds the previous response may serve the turn.
pub const CHAIN_MAX: usize = 1000;

/// `limit` of `GET /v1/responses/{id}/input_items` when none is given (OpenAI's default).
pub const INPUT_ITEMS_DEFAULT_LIMIT: usize = 20;
/// The largest `limit` of `GET /v1/responses/{id}/input_items` (OpenAI's bound).
pub const INPUT_ITEMS_MAX_LIMIT: usize = 100;

/// What hale knows of the response a turn continues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Previous<'a> {
    /// hale never issued it (or the caller may not see it): only a
    /// provider speaking the Responses API may know it.
    Unknown,
    /// hale keeps it: answered by `provider`, whose own id for it is
    /// `provider_id` (none: hale made the id, e.g. another kind answered
    /// or a stream was resumed elsewhere); `expandable` when the whole
    /// chain is kept and within [`CHAIN_MAX`].
    Kept {
        provider: &'a str,
        provider_id: bool,
        expandable: bool,
    },
}

/// How one attempt carries the conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// The client's request as sent, `previous_response_id` included.
    Passthrough,
    /// The expanded conversation, without `previous_response_id`.
    Expand,
    /// This deployment cannot serve the turn: not called.
    Skip,
}

/// The rule for one attempt on a deployment of `provider` (`responses`:
/// it speaks the Responses API). `changed`: hale changed the conversation
/// (compaction, a nudge) after expanding it, so only the expanded one says
/// what the model must see.
pub fn link(previous: Previous<'_>, provider: &str, responses: bool, changed: bool) -> Link {
    match previous {
        Previous::Unknown => {
            if responses {
                Link::Passthrough
            } else {
                Link::Skip
            }
        }
        Previous::Kept {
            provider: holder,
            provider_id,
            expandable,
        } => {
            let holds = responses && provider_id && holder == provider;
            match (holds && !(changed && expandable), expandable) {
                (true, _) => Link::Passthrough,
                (false, true) => Link::Expand,
                (false, false) => Link::Skip,
            }
        }
    }
}

/// Whether a caller that may act as `allowed` (`None`: any agent) may read,
/// delete or continue a response kept for agent `owner`.
pub fn may_read(allowed: Option<&[String]>, owner: &str) -> bool {
    match allowed {
        None => true,
        Some(list) => list.iter().any(|a| a == owner),
    }
}

/// What hale does with a `previous_response_id` a caller sends
/// ([`may_continue`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Continue {
    /// hale keeps it, for an agent the caller may act as: the turn
    /// continues from what hale keeps ([`link`] with [`Previous::Kept`]).
    Kept,
    /// hale does not keep it and the caller may act as every agent (no
    /// keys, an admin key): it goes as sent to the plan's Responses
    /// deployments ([`link`] with [`Previous::Unknown`]).
    Forward,
    /// Refused with the 404 of an id that does not exist, before any
    /// provider is called: it is kept for an agent the caller may not act
    /// as, or hale does not keep it and the caller's key is scoped to
    /// some agents.
    Refuse,
}

/// The rule for a `previous_response_id`: `owner` is the agent hale keeps
/// it for (`None`: hale does not keep it — never handed it out, `store:
/// false`, pruned or deleted), `allowed` the agents the caller may act as
/// (`None`: any).
///
/// Why an id hale does not keep is refused to an agent-scoped key: the
/// providers keep responses under the operator's one key, shared by every
/// tenant, so an id forwarded as sent continues whatever conversation the
/// provider holds under it — another tenant's that hale no longer keeps, or
/// one made with the operator's key outside hale. Only a caller that may
/// act as every agent may reach those; to a scoped key, an id hale does not
/// keep and another agent's are the same 404, so neither is an oracle.
pub fn may_continue(allowed: Option<&[String]>, owner: Option<&str>) -> Continue {
    match (owner, allowed) {
        (Some(owner), allowed) => {
            if may_read(allowed, owner) {
                Continue::Kept
            } else {
                Continue::Refuse
            }
        }
        (None, None) => Continue::Forward,
        (None, Some(_)) => Continue::Refuse,
    }
}

/// The order of a listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    Asc,
    Desc,
}

impl Order {
    /// `asc` or `desc`; anything else is `None`.
    pub fn parse(s: &str) -> Option<Order> {
        match s {
            "asc" => Some(Order::Asc),
            "desc" => Some(Order::Desc),
            _ => None,
        }
    }
}

/// A page of a list of `len` items (in their stored order): the indices to
/// answer, in the page's order, and whether more follow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub indices: Vec<usize>,
    pub has_more: bool,
}

/// One page of a response's input items: `order` (OpenAI's default is
/// `desc`, newest first), starting after the item at index `after` (in
/// stored order; `None`: from the start), at most `limit` items (clamped to
/// 1..=[`INPUT_ITEMS_MAX_LIMIT`]).
pub fn page(len: usize, order: Order, after: Option<usize>, limit: usize) -> Page {
    let limit = limit.clamp(1, INPUT_ITEMS_MAX_LIMIT);
    let all: Vec<usize> = match order {
        Order::Asc => (0..len).collect(),
        Order::Desc => (0..len).rev().collect(),
    };
    let start = match after {
        None => 0,
        Some(a) => all
            .iter()
            .position(|&i| i == a)
            .map_or(all.len(), |p| p + 1),
    };
    let rest = &all[start.min(all.len())..];
    Page {
        indices: rest.iter().take(limit).copied().collect(),
        has_more: rest.len() > limit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_table() {
        let kept = |provider_id, expandable| Previous::Kept {
            provider: "resp",
            provider_id,
            expandable,
        };
        // (previous, target provider, speaks responses, changed, link)
        let table = [
            // An unknown id: only a Responses provider may know it.
            (Previous::Unknown, "resp", true, false, Link::Passthrough),
            (Previous::Unknown, "anth", false, false, Link::Skip),
            (Previous::Unknown, "resp", true, true, Link::Passthrough),
            // The holder with its own id: the client's bytes.
            (kept(true, true), "resp", true, false, Link::Passthrough),
            // The holder, but hale changed the conversation: expanded.
            (kept(true, true), "resp", true, true, Link::Expand),
            // ... unless expansion is impossible: the holder still serves.
            (kept(true, false), "resp", true, true, Link::Passthrough),
            // Another provider (another kind, another account): expanded.
            (kept(true, true), "resp2", true, false, Link::Expand),
            (kept(true, true), "anth", false, false, Link::Expand),
            // hale made the id (another kind answered, a resumed stream): expanded everywhere.
            (kept(false, true), "resp", true, false, Link::Expand),
            // Not expandable and not the holder: cannot serve.
            (kept(true, false), "resp2", true, false, Link::Skip),
            (kept(false, false), "resp", true, false, Link::Skip),
            (kept(true, false), "anth", false, false, Link::Skip),
        ];
        for (prev, provider, responses, changed, want) in table {
            assert_eq!(
                link(prev, provider, responses, changed),
                want,
                "{prev:?} {provider} {responses} {changed}"
            );
        }
    }

    #[test]
    fn may_read_follows_the_key_scope() {
        let mine = ["a".to_string(), "b".to_string()];
        assert!(may_read(None, "anyone"));
        assert!(may_read(Some(&mine), "b"));
        assert!(!may_read(Some(&mine), "c"));
        assert!(!may_read(Some(&[]), "a"));
    }

    #[test]
    fn may_continue_table() {
        let alice = ["alice".to_string()];
        let both = ["alice".to_string(), "bob".to_string()];
        let none: [String; 0] = [];
        /// (the agents the caller may act as, the id's owner, what becomes of the id)
        type Row<'a> = (Option<&'a [String]>, Option<&'a str>, Continue);
        let table: [Row<'_>; 9] = [
            // No keys or an admin key: any kept id, and an unknown one goes as sent.
            (None, Some("bob"), Continue::Kept),
            (None, None, Continue::Forward),
            // An agent key: its own agents' ids are continued ...
            (Some(&alice), Some("alice"), Continue::Kept),
            (Some(&both), Some("bob"), Continue::Kept),
            // ... another agent's are refused ...
            (Some(&alice), Some("bob"), Continue::Refuse),
            (Some(&none), Some("alice"), Continue::Refuse),
            // ... and so is an id hale does not keep: it is never forwarded
            // with the operator's provider key.
            (Some(&alice), None, Continue::Refuse),
            (Some(&both), None, Continue::Refuse),
            (Some(&none), None, Continue::Refuse),
        ];
        for (allowed, owner, want) in table {
            assert_eq!(may_continue(allowed, owner), want, "{allowed:?} {owner:?}");
        }
    }

    #[test]
    fn page_table() {
        /// (len, order, after, limit, indices, has_more)
        type Row = (usize, Order, Option<usize>, usize, Vec<usize>, bool);
        let table: [Row; 9] = [
            (3, Order::Asc, None, 20, vec![0, 1, 2], false),
            (3, Order::Desc, None, 20, vec![2, 1, 0], false),
            (3, Order::Asc, None, 2, vec![0, 1], true),
            (3, Order::Asc, Some(1), 2, vec![2], false),
            (3, Order::Desc, Some(2), 1, vec![1], true),
            // After the last one: nothing.
            (3, Order::Desc, Some(0), 5, vec![], false),
            // An `after` not in the list: nothing.
            (3, Order::Asc, Some(9), 5, vec![], false),
            // limit 0 reads as 1; over the bound, the bound.
            (3, Order::Asc, None, 0, vec![0], true),
            (150, Order::Asc, None, 1000, (0..100).collect(), true),
        ];
        for (len, order, after, limit, indices, has_more) in table {
            assert_eq!(
                page(len, order, after, limit),
                Page { indices, has_more },
                "{len} {order:?} {after:?} {limit}"
            );
        }
        assert_eq!(Order::parse("asc"), Some(Order::Asc));
        assert_eq!(Order::parse("ASC"), None);
    }
}
