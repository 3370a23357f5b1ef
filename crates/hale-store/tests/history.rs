//! The health history on both backends: transition events are kept in the
//! transaction that appends them (other events are not), minutes flushed by
//! two instances add up, a range/agent/deployment query returns both
//! oldest first, and pruning drops only what is older than the cutoff.

mod common;

use hale_core::event::{Event, EventKind};
use hale_core::history::{MinuteRow, prune_cutoff};
use hale_store::{HistoryQuery, Store, Write};
use serde_json::json;

const T0: u64 = 1_700_000_040_000;
const MIN: u64 = 60_000;

fn ev(id: u64, kind: EventKind, agent: &str, time_ms: u64, payload: serde_json::Value) -> Event {
    Event {
        id: format!("01HIST{id:020}"),
        time_ms,
        kind,
        agent: Some(agent.into()),
        task: None,
        turn: None,
        payload,
    }
}

fn minute(d: &str, minute_ms: u64, calls: u64, failures: u64, lat: u64) -> MinuteRow {
    MinuteRow {
        deployment: d.into(),
        minute_ms,
        calls,
        failures,
        latency_sum_ms: lat,
    }
}

async fn history_contract(store: &Store) {
    store
        .commit(vec![
            Write::Event(ev(
                1,
                EventKind::AgentPaused,
                "a",
                T0,
                json!({"reason": "r"}),
            )),
            Write::Event(ev(2, EventKind::TurnCompleted, "a", T0 + 1, json!({}))),
            Write::Event(ev(
                3,
                EventKind::ProviderCooldown,
                "b",
                T0 + MIN,
                json!({"deployment": "p/m"}),
            )),
            Write::Event(ev(4, EventKind::AgentResumed, "a", T0 + 2 * MIN, json!({}))),
        ])
        .await
        .unwrap();
    // The same event again (at-least-once writers) is kept once.
    store
        .commit(vec![Write::Event(ev(
            1,
            EventKind::AgentPaused,
            "a",
            T0,
            json!({"reason": "r"}),
        ))])
        .await
        .unwrap();
    // Two instances flush the same minute of p/m; one flush carries two minutes.
    store
        .commit(vec![Write::Minutes(vec![
            minute("p/m", T0, 10, 2, 1000),
            minute("p/m", T0 + MIN, 4, 0, 400),
        ])])
        .await
        .unwrap();
    store
        .commit(vec![Write::Minutes(vec![
            minute("p/m", T0, 5, 1, 500),
            minute("q/n", T0, 1, 1, 9),
        ])])
        .await
        .unwrap();

    let all = HistoryQuery {
        from_ms: 0,
        to_ms: u64::MAX,
        ..HistoryQuery::default()
    };
    let h = store.history(&all).await.unwrap();
    let kinds: Vec<&str> = h.transitions.iter().map(|t| t.kind.as_str()).collect();
    assert_eq!(
        kinds,
        vec!["agent.paused", "provider.cooldown", "agent.resumed"]
    );
    assert_eq!(h.transitions[0].payload, json!({"reason": "r"}));
    assert_eq!(h.transitions[1].deployment.as_deref(), Some("p/m"));
    assert_eq!(
        h.minutes,
        vec![
            minute("p/m", T0, 15, 3, 1500),
            minute("q/n", T0, 1, 1, 9),
            minute("p/m", T0 + MIN, 4, 0, 400),
        ]
    );

    // Filters: agent (transitions only), deployment (both), time range.
    let by_agent = store
        .history(&HistoryQuery {
            agent: Some("a".into()),
            ..all.clone()
        })
        .await
        .unwrap();
    assert_eq!(by_agent.transitions.len(), 2);
    assert_eq!(by_agent.minutes.len(), 3);
    let by_dep = store
        .history(&HistoryQuery {
            deployment: Some("p/m".into()),
            ..all.clone()
        })
        .await
        .unwrap();
    assert_eq!(by_dep.transitions.len(), 1);
    assert!(by_dep.minutes.iter().all(|m| m.deployment == "p/m"));
    let ranged = store
        .history(&HistoryQuery {
            from_ms: T0 + MIN,
            to_ms: T0 + 2 * MIN,
            ..all.clone()
        })
        .await
        .unwrap();
    assert_eq!(ranged.transitions.len(), 1);
    assert_eq!(ranged.minutes, vec![minute("p/m", T0 + MIN, 4, 0, 400)]);

    // Pruning at a cutoff one minute after T0 drops the first minute only.
    let now = T0 + MIN + hale_core::config::HISTORY_RETENTION.as_millis() as u64;
    let cutoff = prune_cutoff(now, hale_core::config::HISTORY_RETENTION);
    assert_eq!(cutoff, T0 + MIN);
    let dropped = store.prune_history(cutoff).await.unwrap();
    assert_eq!(dropped, 1 + 2, "agent.paused and the two T0 minutes");
    let after = store.history(&all).await.unwrap();
    assert_eq!(after.transitions.len(), 2);
    assert_eq!(after.minutes, vec![minute("p/m", T0 + MIN, 4, 0, 400)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_history_keeps_transitions_adds_minutes_and_prunes() {
    let Some(t) = common::sqlite().await else {
        return;
    };
    history_contract(&t.store).await;
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_history_keeps_transitions_adds_minutes_and_prunes() {
    let Some(t) = common::postgres().await else {
        return;
    };
    history_contract(&t.store).await;
    t.finish().await;
}
