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
use hale_core::event::{Event, EventKind};
use hale_core::pause::{self, Admit, Pause, PausedBy};
use hale_store::AgentRecord;

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
}

/// Counts a finished turn: resets or grows the consecutive failures, pauses
/// a named agent at the threshold, and settles a pause's trial. `count`
/// adds the turn's own counters to the record in the same update.
pub fn after_turn(
    gw: &Gateway,
    f: Finished<'_>,
    count: impl FnOnce(&mut AgentRecord),
) -> AfterTurn {
    let Finished {
        agent,
        turn_id,
        named,
        admission,
        outcome,
        now_ms,
    } = f;
    let cfg = &gw.cfg.self_healing;
    let ((paused, resumed), record) = gw.update_agent_rt(agent, |rt| {
        count(&mut rt.record);
        rt.record.last_seen_ms = Some(now_ms);
        let mut paused = None;
        let mut resumed = None;
        match outcome {
            Outcome::Succeeded => {
                rt.record.consecutive_failures = 0;
                if admission == Admission::Trial
                    && let Some(p) = rt.pause.filter(|p| p.by == PausedBy::Auto)
                {
                    rt.set_pause(None);
                    resumed = Some(p);
                }
            }
            Outcome::Failed => {
                rt.record.failed_turns += 1;
                rt.record.consecutive_failures += 1;
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
        (paused, resumed)
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
    AfterTurn { record, events }
}
