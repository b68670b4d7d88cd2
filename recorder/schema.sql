-- harnessproxy DuckDB schema. Filled from per-rollout journals (the ground truth); safe to re-apply.

-- One row per LLM call an agent made through its rollout's proxy, failed calls included.
CREATE TABLE IF NOT EXISTS llm_calls (
    call_id               VARCHAR PRIMARY KEY,
    rollout_id            VARCHAR NOT NULL,   -- from the listener the call arrived on, never from the request
    seq                   INTEGER NOT NULL,   -- order of arrival on that listener, from 1
    protocol              VARCHAR NOT NULL,   -- anthropic | openai_chat | openai_responses
    kind                  VARCHAR NOT NULL,   -- main | side | count_tokens | compaction | models | probe | unknown
    method                VARCHAR NOT NULL,
    path                  VARCHAR NOT NULL,   -- as the agent sent it, query included
    endpoint              VARCHAR,            -- canonical endpoint forwarded upstream
    model                 VARCHAR,            -- as requested by the agent
    stream                BOOLEAN NOT NULL,
    status                INTEGER,            -- HTTP status the agent received
    stop_reason           VARCHAR,            -- stop_reason | finish_reason | response status
    input_tokens          BIGINT,
    output_tokens         BIGINT,
    cache_read_tokens     BIGINT,
    cache_creation_tokens BIGINT,
    started_at            TIMESTAMPTZ NOT NULL,
    first_byte_ms         DOUBLE,             -- first response byte (streams: first body chunk), after start
    duration_ms           DOUBLE,
    error_kind            VARCHAR,            -- NULL when the call succeeded
    error_message         VARCHAR,
    incomplete            BOOLEAN NOT NULL,   -- the response broke off (upstream reset, client hung up)
    request_headers       JSON,               -- credentials redacted
    request_body          JSON,               -- exactly as received (NULL when it was not JSON)
    upstream_request      JSON,               -- url, headers (redacted), body when it differs from request_body
    response_body         JSON,               -- non-streaming body, or the stream reassembled into that shape
    response_events       JSON,               -- streams: every SSE event as received, unknown types included
    response_meta         JSON,               -- response headers, unknown event types, terminal event seen
    record                JSON                -- request/response parts not stored above (raw non-JSON bodies)
);

-- One row per `harnessproxy run` (a resumed run keeps its row; its config is the latest start's).
CREATE TABLE IF NOT EXISTS runs (
    run_id       VARCHAR PRIMARY KEY,
    started_at   TIMESTAMPTZ,
    finished_at  TIMESTAMPTZ,          -- NULL while running, or when the controller was killed
    agent        VARCHAR,
    agent_version VARCHAR,
    model        VARCHAR,
    upstream     VARCHAR,              -- "oracle" or the upstream base URL
    sandbox      VARCHAR,              -- local | docker
    n            INTEGER,              -- rollouts per task
    concurrency  INTEGER,
    config       JSON
);

CREATE TABLE IF NOT EXISTS tasks (
    run_id       VARCHAR NOT NULL,
    task_id      VARCHAR NOT NULL,
    source       VARCHAR,              -- task folder, or SWE-bench file#instance
    instruction  VARCHAR,
    grader       VARCHAR,              -- reward (Harbor) | swebench
    workdir      VARCHAR,
    metadata     JSON,
    PRIMARY KEY (run_id, task_id)
);

CREATE TABLE IF NOT EXISTS rollouts (
    rollout_id       VARCHAR PRIMARY KEY,
    run_id           VARCHAR NOT NULL,
    task_id          VARCHAR NOT NULL,
    idx              INTEGER NOT NULL,  -- 0..n-1 within the task
    attempt          INTEGER NOT NULL,  -- 1 + infra retries
    agent            VARCHAR,
    model            VARCHAR,
    outcome          VARCHAR NOT NULL,  -- passed | failed | timeout | error
    error_kind       VARCHAR,           -- infra | agent | eval
    error            VARCHAR,
    agent_exit_code  INTEGER,
    started_at       TIMESTAMPTZ,
    finished_at      TIMESTAMPTZ,
    queued_s         DOUBLE,            -- waiting for a concurrency slot
    sandbox_start_s  DOUBLE,
    agent_s          DOUBLE,
    collect_s        DOUBLE,            -- artifacts, diff
    eval_s           DOUBLE,
    total_s          DOUBLE,            -- from the slot to the result, queueing excluded
    diff_patch       VARCHAR,           -- git-style patch of text files
    diff_added       VARCHAR[],
    diff_modified    VARCHAR[],
    diff_deleted     VARCHAR[],
    diff_binary      VARCHAR[]
);

CREATE TABLE IF NOT EXISTS evaluations (
    rollout_id   VARCHAR PRIMARY KEY,
    passed       BOOLEAN NOT NULL,
    reward       DOUBLE,
    metrics      JSON,
    exit_code    INTEGER,               -- of tests/test.sh
    stdout_tail  VARCHAR,
    stderr_tail  VARCHAR,
    duration_s   DOUBLE,
    error        VARCHAR                -- the evaluator failed (error_kind = eval)
);

CREATE TABLE IF NOT EXISTS artifacts (
    rollout_id   VARCHAR NOT NULL,
    name         VARCHAR NOT NULL,      -- e.g. claude-stream.jsonl, diff.tar.gz, a session transcript
    size         BIGINT,
    content      BLOB,
    PRIMARY KEY (rollout_id, name)
);

CREATE TABLE IF NOT EXISTS events (
    event_id     VARCHAR PRIMARY KEY,   -- run_id:line of the run journal
    run_id       VARCHAR NOT NULL,
    rollout_id   VARCHAR,
    ts           TIMESTAMPTZ,
    state        VARCHAR,               -- running | evaluating | retry | done
    attempt      INTEGER,
    detail       VARCHAR
);

-- Unbiased pass@k (Chen et al. 2021): 1 - C(n-c, k) / C(n, k), as a stable product.
CREATE OR REPLACE MACRO pass_at_k(n, c, k) AS
    CASE WHEN n < k THEN NULL
         WHEN n - c < k THEN 1.0
         ELSE 1.0 - coalesce(list_product(list_transform(range(n - c + 1, n + 1), lambda i: 1.0 - k / i)), 1.0)
    END;

CREATE OR REPLACE VIEW rollout_summary AS
SELECT r.run_id, r.task_id, r.rollout_id, r.idx, r.attempt, r.agent, r.model, r.outcome, r.error_kind,
       e.passed, e.reward, r.total_s, r.agent_s, r.eval_s,
       count(c.call_id) AS llm_calls,
       sum(c.input_tokens) AS input_tokens, sum(c.output_tokens) AS output_tokens
FROM rollouts r
LEFT JOIN evaluations e USING (rollout_id)
LEFT JOIN llm_calls c USING (rollout_id)
GROUP BY ALL;

CREATE OR REPLACE VIEW task_summary AS
SELECT run_id, task_id,
       count(*) AS n,
       count(*) FILTER (WHERE outcome = 'passed') AS passed,
       count(*) FILTER (WHERE outcome = 'passed') / count(*) AS pass_at_1,
       pass_at_k(count(*), count(*) FILTER (WHERE outcome = 'passed'), count(*)) AS pass_at_n,
       avg(reward) AS mean_reward,
       count(*) FILTER (WHERE error_kind = 'infra') AS infra_errors,
       count(*) FILTER (WHERE error_kind = 'agent') AS agent_errors,
       count(*) FILTER (WHERE error_kind = 'eval') AS eval_errors,
       avg(total_s) AS mean_duration_s
FROM rollout_summary
GROUP BY run_id, task_id;
