//! Agents' gate and failure counting (DESIGN §1 step 2, §5 "Pause and
//! automatic resume").
//!
//! The rules are hale-core's [`hale_core::pause`]: a *named* agent is paused
//! after `max_consecutive_failures` failed turns; an automatic pause lets one
//! trial request through after `resume_probe_after` (doubling per failed
//! trial) and a successful trial resumes the agent; an operator's pause holds
//! until an operator resumes. This module applies them to the agents' records
//! held by [`Gateway`] and reports each change as an event that commits with
//! the record.

use crate::error::HaleError;
use crate::state::Gateway;
use hale_core::counts::{Count, Streak};
use hale_core::event::{Event, EventKind};
use hale_core::pause::{self, Admit, Pause, PausedBy};
use hale_store::{AgentControl, AgentRecord, Write};

/// What the gate decided for a request of a non-paused or paused agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Not paused.
    Serve,
    /// Paused automatically; this request is the trial that may resume it.
    Trial,
}

/// The agent gate: serve, let through as a pause's trial, or refuse (423).
pub fn admit(gw: &Gateway, agent: &str, now_ms: u64) -> Result<Admission, HaleError> {
    let mut map = gw.agents.lock().expect("agents lock");
    let Some(rt) = map.get_mut(agent) else {
        return Ok(Admission::Serve);
    };
    let Some(mut p) = rt.pause else {
        return Ok(Admission::Serve);
    };
    match p.admit(&gw.cfg.self_healing, now_ms) {
        Admit::Trial => {
            rt.set_pause(Some(p));
            Ok(Admission::Trial)
        }
        Admit::Refuse { next_trial_in_ms } => Err(HaleError::agent_paused(
            agent,
            rt.record.consecutive_failures,
            p.by,
            next_trial_in_ms,
        )),
    }
}

/// How a turn ended, for the agent's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    /// Failed for a reason that counts against the agent (not the caller's input).
    Failed,
    /// Failed on the caller's input (content policy, bad request): no verdict.
    CallerFault,
}

/// What a finished turn changed in the agent's gate.
pub struct AfterTurn {
    pub record: AgentRecord,
    /// `agent.paused` / `agent.resumed` to commit with the record.
    pub events: Vec<Event>,
    /// The turn's count and its number, to write as a
    /// [`hale_store::Write::Count`] (the database adds it to the row).
    pub count: (u64, Count),
}

/// A finished turn, as the agent gate sees it.
#[derive(Debug, Clone, Copy)]
pub struct Finished<'a> {
    pub agent: &'a str,
    pub turn_id: &'a str,
    /// The agent has an identity (it may be paused).
    pub named: bool,
    pub admission: Admission,
    pub outcome: Outcome,
    pub now_ms: u64,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub cost_usd: f64,
}

/// Counts a finished turn (turns, tokens, cost; the failures in a row
/// cleared or extended — `hale_core::counts`), pauses a named agent at the
/// threshold, and settles a pause's trial.
pub fn after_turn(gw: &Gateway, f: Finished<'_>) -> AfterTurn {
    let Finished {
        agent,
        turn_id,
        named,
        admission,
        outcome,
        now_ms,
        tokens_in,
        tokens_out,
        cost_usd,
    } = f;
    let cfg = &gw.cfg.self_healing;
    let streak = match outcome {
        Outcome::Succeeded => Streak::Clear,
        Outcome::Failed => Streak::Extend,
        Outcome::CallerFault => Streak::Keep,
    };
    let count = Count::turn(streak, tokens_in, tokens_out, cost_usd);
    let ((paused, resumed, n), record) = gw.update_agent_rt(agent, |rt| {
        let n = rt.count(count);
        rt.named |= named;
        rt.seen(now_ms);
        let mut paused = None;
        let mut resumed = None;
        match outcome {
            Outcome::Succeeded => {
                if admission == Admission::Trial
                    && let Some(p) = rt.pause.filter(|p| p.by == PausedBy::Auto)
                {
                    rt.set_pause(None);
                    resumed = Some(p);
                }
            }
            Outcome::Failed => {
                rt.record.last_failure_ms = Some(now_ms);
                match rt.pause {
                    Some(mut p) if admission == Admission::Trial => {
                        p.trial_failed(cfg, now_ms);
                        rt.set_pause(Some(p));
                    }
                    Some(_) => {}
                    None if pause::should_pause(
                        cfg,
                        named,
                        false,
                        rt.record.consecutive_failures,
                    ) =>
                    {
                        let p = Pause::auto(cfg, now_ms);
                        rt.set_pause(Some(p));
                        paused = Some(p);
                    }
                    None => {}
                }
            }
            Outcome::CallerFault => {}
        }
        (paused, resumed, n)
    });
    let mut events = Vec::new();
    if let Some(p) = paused {
        events.push(
            gw.event(EventKind::AgentPaused)
                .agent(agent)
                .turn(turn_id)
                .payload(serde_json::json!({
                    "by": p.by,
                    "reason": format!("{} consecutive failed turns", record.consecutive_failures),
                    "next_trial_in_ms": p.next_trial_in_ms(now_ms),
                })),
        );
    }
    if let Some(p) = resumed {
        events.push(
            gw.event(EventKind::AgentResumed)
                .agent(agent)
                .turn(turn_id)
                .payload(serde_json::json!({
                    "by": "auto",
                    "reason": "a trial request succeeded",
                    "paused_ms": now_ms.saturating_sub(p.since_ms),
                    "failed_trials": p.failed_trials,
                })),
        );
    }
    for e in &events {
        gw.metrics.event(e.kind);
    }
    AfterTurn {
        record,
        events,
        count: (n, count),
    }
}

/// Another instance's turns, learned from the totals the database answered
/// to one of this instance's counts, brought the failures in a row to the
/// threshold: pause the agent as its own failed turn would have, and
/// announce it. Returns the writes to commit (none when nothing changes).
pub fn pause_on_counted(gw: &Gateway, agent: &str, now_ms: u64) -> Vec<Write> {
    let cfg = &gw.cfg.self_healing;
    let (paused, record) = gw.update_agent_rt(agent, |rt| {
        let due = pause::should_pause(
            cfg,
            rt.named,
            rt.pause.is_some(),
            rt.record.consecutive_failures,
        );
        due.then(|| {
            let p = Pause::auto(cfg, now_ms);
            rt.set_pause(Some(p));
            p
        })
    });
    let Some(p) = paused else {
        return Vec::new();
    };
    let ev = gw
        .event(EventKind::AgentPaused)
        .agent(agent)
        .payload(serde_json::json!({
            "by": p.by,
            "reason": format!(
                "{} consecutive failed turns (counted across instances)",
                record.consecutive_failures
            ),
            "next_trial_in_ms": p.next_trial_in_ms(now_ms),
        }));
    gw.metrics.event(ev.kind);
    vec![
        Write::Agent(record),
        Write::Event(ev),
        crate::sync::announce_control(agent, None, Some(AgentControl::Paused { pause: p })),
    ]
}
