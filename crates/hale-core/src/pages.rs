//! Pages of the admin API's agent list (`GET /agents`).
//!
//! After hours of traffic the store knows every agent ever seen (100k+ in
//! the many-agents benchmark's ten minutes), while memory holds only the
//! active set (`crate::memory`). A list built whole from the store grew
//! with every agent ever seen: one read held every row and its JSON at
//! once (63 MB of JSON and a 925 MB peak RSS for 20k agents, measured),
//! and the dashboard asks for it every two seconds. So the list is read in
//! pages of at most [`PAGE_MAX`] agents, in the byte order of their ids,
//! walked with a cursor (the last id of a page).
//!
//! A page merges two sources: the agents known in memory (held, or named by
//! the config), whose state memory decides, and one page of stored rows,
//! which holds the rest. [`page`] is that merge; it never skips or repeats
//! an id across a walk, whatever the two sources hold
//! (`a_walk_lists_every_id_once_in_order`).

/// Agents in a page when the caller names no `limit`.
pub const PAGE_DEFAULT: usize = 100;

/// The most agents one page may hold: a page is built in memory whole.
pub const PAGE_MAX: usize = 1000;

/// The page size a caller asked for (`limit`): [`PAGE_DEFAULT`] when absent,
/// else a whole number from 1 to [`PAGE_MAX`].
pub fn page_limit(asked: Option<&str>) -> Result<usize, String> {
    let Some(asked) = asked else {
        return Ok(PAGE_DEFAULT);
    };
    match asked.parse::<usize>() {
        Ok(n) if (1..=PAGE_MAX).contains(&n) => Ok(n),
        Ok(_) | Err(_) => Err(format!(
            "limit must be a whole number from 1 to {PAGE_MAX}, not {asked:?}"
        )),
    }
}

/// One page of a walk over the agents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<'a> {
    /// The ids of the page, ascending, at most the limit.
    pub ids: Vec<&'a str>,
    /// Where the next page starts (pass it as `after`), or `None` at the end.
    /// A page may hold fewer ids than the limit (even none) and still have
    /// a next one: the walk ends only when this is `None`.
    pub next: Option<&'a str>,
}

/// The page after `after` (from the start when `None`), of at most `limit`
/// ids, ascending by bytes.
///
/// - `memory`: every id memory decides for (held, or named by the config),
///   with whether it belongs in the list (the filter applied to its state in
///   memory); any order, complete.
/// - `stored`: the first `limit + 1` stored ids after `after` that match the
///   filter by their stored row, ascending (`Store::agents_page`). An id in
///   `memory` is decided there, so its stored row is ignored.
///
/// When the store returned `limit + 1` rows it has more beyond the last of
/// them, and ids past that one are not known yet: the page stops there.
pub fn page<'a>(
    memory: impl IntoIterator<Item = (&'a str, bool)>,
    stored: &[&'a str],
    after: Option<&str>,
    limit: usize,
) -> Page<'a> {
    let limit = limit.max(1);
    let after_cursor = |id: &str| after.is_none_or(|a| id > a);
    let mut decided: Vec<(&'a str, bool)> = memory
        .into_iter()
        .filter(|(id, _)| after_cursor(id))
        .collect();
    decided.sort_unstable();
    decided.dedup_by(|a, b| a.0 == b.0);
    let in_memory = |id: &str| decided.binary_search_by(|(d, _)| (*d).cmp(id)).is_ok();
    // The store knows its rows up to `bound`; beyond it, only memory is complete.
    let bound = (stored.len() > limit).then(|| stored[stored.len() - 1]);
    let mut ids: Vec<&'a str> = decided
        .iter()
        .filter(|(_, listed)| *listed)
        .map(|(id, _)| *id)
        .chain(
            stored
                .iter()
                .copied()
                .filter(|id| after_cursor(id) && !in_memory(id)),
        )
        .filter(|id| bound.is_none_or(|b| *id <= b))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.len() > limit {
        ids.truncate(limit);
        let next = ids.last().copied();
        return Page { ids, next };
    }
    Page { ids, next: bound }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_limit_asked_is_checked() {
        assert_eq!(page_limit(None), Ok(PAGE_DEFAULT));
        assert_eq!(page_limit(Some("1")), Ok(1));
        assert_eq!(page_limit(Some("1000")), Ok(PAGE_MAX));
        for bad in [
            "0",
            "1001",
            "-1",
            "ten",
            "",
            "1.5",
            "99999999999999999999999",
        ] {
            let e = page_limit(Some(bad)).expect_err(bad);
            assert!(e.contains("from 1 to 1000"), "{e}");
        }
    }

    #[test]
    fn a_page_merges_memory_and_the_store() {
        // Memory holds b (listed) and d (held, filtered out); the store
        // also has d (its row matched, but memory decides) and a, c, e.
        let memory = [("b", true), ("d", false)];
        let p = page(memory, &["a", "c", "d", "e"], None, 10);
        assert_eq!(p.ids, ["a", "b", "c", "e"]);
        assert_eq!(p.next, None);
        // A full store page: nothing past its last row is listed yet.
        let p = page([("z", true)], &["a", "c", "e"], None, 2);
        assert_eq!(p.ids, ["a", "c"]);
        assert_eq!(p.next, Some("c"));
        // Every stored row of the page decided otherwise in memory: an
        // empty page that still goes on.
        let p = page(
            [("a", false), ("b", false), ("c", false)],
            &["a", "b", "c"],
            None,
            2,
        );
        assert_eq!(p.ids, Vec::<&str>::new());
        assert_eq!(p.next, Some("c"));
        // After the cursor only, byte order ("B" < "a").
        let p = page([("B", true), ("a", true)], &["A", "b"], Some("A"), 10);
        assert_eq!(p.ids, ["B", "a", "b"]);
    }

    /// The store's answer: the first `limit + 1` matching rows after `after`.
    fn store_page<'a>(rows: &[(&'a str, bool)], after: Option<&str>, limit: usize) -> Vec<&'a str> {
        let mut ids: Vec<&'a str> = rows
            .iter()
            .filter(|(id, listed)| *listed && after.is_none_or(|a| *id > a))
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids.truncate(limit + 1);
        ids
    }

    proptest! {
        /// Following `next` from the start lists exactly the ids that
        /// belong, each once, ascending, whatever memory and the store hold
        /// (stored rows of held agents may disagree with memory), for any
        /// page size.
        #[test]
        fn a_walk_lists_every_id_once_in_order(
            agents in proptest::collection::btree_map(
                "[a-dA-D_]{1,3}",
                // (held, listed in memory, stored, listed by the stored row)
                (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()),
                0..40,
            ),
            limit in 1usize..6,
        ) {
            let memory: Vec<(&str, bool)> = agents
                .iter()
                .filter(|(_, a)| a.0)
                .map(|(id, a)| (id.as_str(), a.1))
                .collect();
            let rows: Vec<(&str, bool)> = agents
                .iter()
                .filter(|(_, a)| a.2)
                .map(|(id, a)| (id.as_str(), a.3))
                .collect();
            // Memory decides for what it holds; the store for the rest.
            let want: Vec<&str> = agents
                .iter()
                .filter(|(_, a)| if a.0 { a.1 } else { a.2 && a.3 })
                .map(|(id, _)| id.as_str())
                .collect();
            let mut seen: Vec<&str> = Vec::new();
            let mut after: Option<&str> = None;
            for _ in 0..=agents.len() + 1 {
                let stored = store_page(&rows, after, limit);
                let p = page(memory.iter().copied(), &stored, after, limit);
                prop_assert!(p.ids.len() <= limit);
                seen.extend(&p.ids);
                match p.next {
                    Some(n) => {
                        prop_assert!(after.is_none_or(|a| n > a), "the cursor moves on");
                        after = Some(n);
                    }
                    None => break,
                }
            }
            prop_assert_eq!(seen, want);
        }
    }
}
