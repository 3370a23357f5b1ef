#!/usr/bin/env python3
"""A deliberately crashy agent for hale's supervised end-to-end test.

It is started by `hale run`, talks to hale with the official `openai` SDK
(OPENAI_BASE_URL points at hale), stores its progress as checkpoints through
hale's API, and crashes on purpose when it reaches step CRASH_AT, on every
start, so the supervisor has to restart it until the recovery limits stop it.

State: a checkpoint {"step": k} means steps 0..k-1 are done, k is next.
- A first start (no HALE_CHECKPOINT) does steps 0..CRASH_AT-1, checkpointing
  after each, then waits for the file named by CRASHY_GATE (the test corrupts
  the newest checkpoint first), then crashes.
- A restart resumes from HALE_CHECKPOINT; re-doing a step whose request
  already completed is answered by hale from its journal (x-hale-replayed).
"""
import json
import os
import sys
import time
import urllib.request

from openai import OpenAI

CRASH_AT = 3

hale = os.environ["HALE_URL"]
agent = os.environ["HALE_AGENT"]
task = os.environ["HALE_TASK"]
gate = os.environ.get("CRASHY_GATE")


def checkpoint(state):
    req = urllib.request.Request(
        f"{hale}/agents/{agent}/tasks/{task}/checkpoints",
        data=json.dumps(state).encode(),
        headers={"content-type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)["id"]


resume = os.environ.get("HALE_CHECKPOINT")
if resume:
    with open(resume) as f:
        state = json.load(f)
    print(f"resumed step={state['step']} restart={os.environ.get('HALE_RESTART')}", flush=True)
else:
    state = {"step": 0}
    print("fresh start", flush=True)

client = OpenAI(
    base_url=os.environ["OPENAI_BASE_URL"],
    api_key="unused-by-hale-loopback",
    max_retries=0,
    default_headers={"x-hale-agent": agent, "x-hale-task": task},
)

step = state["step"]
while step < CRASH_AT:
    raw = client.chat.completions.with_raw_response.create(
        model="r",
        messages=[{"role": "user", "content": f"do step {step}"}],
    )
    replayed = raw.headers.get("x-hale-replayed") == "true"
    answer = raw.parse().choices[0].message.content
    print(f"step {step} replayed={str(replayed).lower()} answer_words={len(answer.split())}", flush=True)
    step += 1
    cp = checkpoint({"step": step, "last_answer": answer[:40]})
    print(f"checkpoint {cp} step={step}", flush=True)

if not resume and gate:
    deadline = time.time() + 60
    while not os.path.exists(gate) and time.time() < deadline:
        time.sleep(0.05)

print(f"crashing on purpose at step {step}", file=sys.stderr, flush=True)
sys.exit(3)
