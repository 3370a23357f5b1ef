//! `hale-bench chaos-hour --peer litellm`: the chaos hour's fleet through
//! a peer gateway instead of hale (issue 41, BENCHMARKS.md "The chaos
//! hour"), for the clients and provider kinds the peer can speak.
//!
//! This module owns the peer's side: which of the hour's provider kinds
//! LiteLLM 1.106.2 reaches on chaos ([`litellm_params`], with why not for
//! the others, [`UNREACHED`]), its config — the same chaos deployments and the same routes as
//! `chaos_hour::hale_yaml`, each route's first reachable deployment as its
//! model group and the rest as LiteLLM fallbacks, with the router's own
//! retries and timeouts as an operator would set them ([`litellm_yaml`]) —
//! and starting it ([`start_litellm`]: from `.peers/litellm`, the venv
//! scripts/peers.sh installs, offline with its bundled cost map). The
//! chaos hour passes its deployments and routes in (this module does not
//! import it), says which of its client kinds a peer serves, and swaps the
//! peer in where it starts hale; hale-only steps (the journal, paused
//! agents, `/mcp`) are `n/a` in its table.

use crate::procs::{self, Proc};
use anyhow::{Context, bail};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// A peer the chaos hour can run its fleet through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Peer {
    /// The LiteLLM proxy, `litellm[proxy]==`[`LITELLM_VERSION`].
    Litellm,
}

/// The LiteLLM release measured (never 1.107.x, 1.82.7 or 1.82.8: those
/// were compromised).
pub const LITELLM_VERSION: &str = "1.106.2";

/// LiteLLM's venv, from the workspace root (scripts/peers.sh installs it).
pub const LITELLM_VENV: &str = ".peers/litellm";

/// The model chaos plays (`task`: the task the prompt names).
const MODEL: &str = "task";

/// LiteLLM's retries per deployment before a fallback, and its timeouts
/// (seconds): hale's `retry.server_error.max_attempts` and the 10 s
/// timeouts `chaos_hour::hale_yaml` sets.
const NUM_RETRIES: u32 = 2;
const TIMEOUT_S: u32 = 10;

/// The provider kinds LiteLLM 1.106.2 does not reach on chaos, and why
/// (tried by hand, BENCHMARKS.md).
pub const UNREACHED: [(&str, &str); 2] = [
    (
        "bedrock",
        "LiteLLM drops `tools` from a Converse request whose model id it does not know \
         (tools only for anthropic./mistral./cohere./meta.llama3-x/amazon.nova ids or cost-map \
         entries; `model_info: {supports_function_calling: true}` does not change it), so the \
         task model answers \"no shell or echo tool among the 0 offered\"",
    ),
    (
        "vertex",
        "with google-cloud-aiplatform in the venv, `vertex_ai/task` (not a claude-* name, so \
         Gemini-on-Vertex to LiteLLM) got no answer in 60 s; `vertex_ai/claude-task` reaches \
         chaos's Claude-on-Vertex with a token from its /token, but chaos plays the task \
         model only for a model named `task…`, so that deployment cannot carry a task",
    ),
];

/// The provider kinds `peer` does not reach on chaos, and why.
pub fn unreached(peer: Peer) -> &'static [(&'static str, &'static str)] {
    match peer {
        Peer::Litellm => &UNREACHED,
    }
}

/// A deployment's `litellm_params` (YAML flow map) at its chaos `addr`;
/// `None` for a kind LiteLLM does not reach ([`UNREACHED`]).
pub fn litellm_params(kind: &str, addr: SocketAddr) -> Option<String> {
    Some(match kind {
        "openai" => format!("{{model: openai/{MODEL}, api_base: 'http://{addr}/v1', api_key: k}}"),
        // LiteLLM's bridge from chat completions to the Responses API.
        "responses" => {
            format!("{{model: openai/responses/{MODEL}, api_base: 'http://{addr}/v1', api_key: k}}")
        }
        "anthropic" => {
            format!("{{model: anthropic/{MODEL}, api_base: 'http://{addr}', api_key: k}}")
        }
        "gemini" => {
            format!("{{model: gemini/{MODEL}, api_base: 'http://{addr}/v1beta', api_key: k-hour}}")
        }
        "azure" => format!(
            "{{model: azure/{MODEL}, api_base: 'http://{addr}', api_version: '2024-10-21', api_key: k-hour}}"
        ),
        "bedrock" | "vertex" => return None,
        other => unreachable!("no provider kind {other}"),
    })
}

/// A provider deployment: (name, kind), as the chaos hour names them.
pub type Deployment = (&'static str, &'static str);
/// A route: its name and its deployments (indexes), in order.
pub type Route = (&'static str, [usize; 3]);

/// LiteLLM's config for `deployments` at `addrs` (by index) and `routes`:
/// a model group per reachable deployment (named as hale names it) and one
/// per route, the route's first reachable
/// deployment, its other reachable ones its fallbacks, in the route's
/// order; the router retries [`NUM_RETRIES`] times with [`TIMEOUT_S`] s
/// timeouts. A route whose deployments are all unreached is left out.
pub fn litellm_yaml(deployments: &[Deployment], routes: &[Route], addrs: &[SocketAddr]) -> String {
    let params: Vec<Option<String>> = deployments
        .iter()
        .enumerate()
        .map(|(i, (_, kind))| litellm_params(kind, addrs[i]))
        .collect();
    let mut y = String::from("model_list:\n");
    let mut fallbacks = Vec::new();
    for (i, (name, _)) in deployments.iter().enumerate() {
        if let Some(p) = &params[i] {
            y.push_str(&format!(
                "  - {{model_name: {name}, litellm_params: {p}}}\n"
            ));
        }
    }
    for (route, targets) in routes {
        let reached: Vec<usize> = targets
            .iter()
            .copied()
            .filter(|&i| params[i].is_some())
            .collect();
        let Some((&first, rest)) = reached.split_first() else {
            continue;
        };
        let p = params[first].as_deref().unwrap_or_default();
        y.push_str(&format!(
            "  - {{model_name: {route}, litellm_params: {p}}}\n"
        ));
        if !rest.is_empty() {
            let names: Vec<&str> = rest.iter().map(|&i| deployments[i].0).collect();
            fallbacks.push(format!("{{{route}: [{}]}}", names.join(", ")));
        }
    }
    y.push_str(&format!(
        "router_settings:\n  num_retries: {NUM_RETRIES}\n  timeout: {TIMEOUT_S}\n  stream_timeout: {TIMEOUT_S}\n  fallbacks: [{}]\n",
        fallbacks.join(", ")
    ));
    y.push_str(&format!(
        "litellm_settings:\n  telemetry: false\n  drop_params: true\n  num_retries: {NUM_RETRIES}\n  request_timeout: {TIMEOUT_S}\n"
    ));
    // hale runs here without keys (loopback only), so LiteLLM does too.
    y.push_str("general_settings:\n  dangerously_permit_weak_or_unset_master_key: true\n");
    y
}

/// LiteLLM's executable in its venv, or a clear error when it is missing.
fn litellm_bin() -> anyhow::Result<PathBuf> {
    let bin = std::env::current_dir()?
        .join(LITELLM_VENV)
        .join("bin/litellm");
    if !bin.is_file() {
        bail!(
            "--peer litellm: LiteLLM's venv is missing ({} not found). Install it from the \
             workspace root: python3 -m venv {LITELLM_VENV} && {LITELLM_VENV}/bin/pip install \
             'litellm[proxy]=={LITELLM_VERSION}' (`scripts/peers.sh install` does the same)",
            bin.display()
        );
    }
    Ok(bin)
}

/// Fails with a clear message when the peer is not installed (before any
/// process is started).
pub fn check_installed(peer: Peer) -> anyhow::Result<()> {
    match peer {
        Peer::Litellm => litellm_bin().map(|_| ()),
    }
}

/// Starts LiteLLM on a free port with [`litellm_yaml`] for `deployments`
/// at `addrs` and `routes`, one worker, offline; ready when
/// `/health/liveliness` answers. The fleet's base URL is its root.
pub async fn start_litellm(
    work: &Path,
    deployments: &[Deployment],
    routes: &[Route],
    addrs: &[SocketAddr],
) -> anyhow::Result<Proc> {
    let bin = litellm_bin()?;
    let cfg = work.join("litellm.yaml");
    std::fs::write(&cfg, litellm_yaml(deployments, routes, addrs))
        .context("cannot write LiteLLM's config")?;
    let command = format!(
        "env LITELLM_LOCAL_MODEL_COST_MAP=True LITELLM_LOG=ERROR {} --config {} --host 127.0.0.1 --port {{port}} --num_workers 1",
        bin.display(),
        cfg.display()
    );
    procs::start_peer("litellm", &command, "/health/liveliness", addrs[0], work).await
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEPLOYMENTS: [Deployment; 5] = [
        ("oa", "openai"),
        ("an", "anthropic"),
        ("ge", "gemini"),
        ("az", "azure"),
        ("br", "bedrock"),
    ];
    const ROUTES: [Route; 3] = [
        ("via-oa", [0, 1, 2]),
        ("via-br", [4, 3, 0]),
        ("via-an", [1, 4, 4]),
    ];

    fn addrs() -> Vec<SocketAddr> {
        (0..DEPLOYMENTS.len())
            .map(|i| SocketAddr::from(([127, 0, 0, 1], 4000 + i as u16)))
            .collect()
    }

    /// Every route is in LiteLLM's config, its first reachable deployment
    /// first and the others its fallbacks; unreached kinds nowhere.
    #[test]
    fn routes_fall_back_across_the_reached_kinds() {
        let y = litellm_yaml(&DEPLOYMENTS, &ROUTES, &addrs());
        for (route, _) in ROUTES {
            assert!(y.contains(&format!("model_name: {route},")), "{route}: {y}");
        }
        // via-br: [br, az, oa] → az with oa as its fallback.
        assert!(y.contains("model_name: via-br, litellm_params: {model: azure/task"));
        assert!(y.contains("{via-br: [oa]}"), "{y}");
        // via-oa: [oa, an, ge], all reached.
        assert!(y.contains("{via-oa: [an, ge]}"), "{y}");
        // via-an: [an, br, br] → an alone, no fallbacks.
        assert!(!y.contains("{via-an:"), "{y}");
        assert!(!y.contains("bedrock/") && !y.contains("vertex_ai/"), "{y}");
        assert!(y.contains("num_retries: 2"));
    }

    #[test]
    fn unreached_kinds_have_no_params_and_a_reason() {
        for (kind, why) in UNREACHED {
            assert!(litellm_params(kind, addrs()[0]).is_none(), "{kind}");
            assert!(!why.is_empty());
        }
    }
}
