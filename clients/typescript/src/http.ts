// OutboxClient: outbox's HTTP API, typed from its OpenAPI document
// (openapi.json, generated into openapi.ts by openapi-typescript; called
// through openapi-fetch). A route, parameter or field the API drops or
// renames fails this file's type check.
import createClient from "openapi-fetch";
import { KeyReusedError, OutboxError, fromHTTP } from "./errors.js";
import { isTerminal, type EnqueueResult, type Intent } from "./intent.js";
import type { components, paths } from "./openapi.js";

/** Statuses after which a request that is safe to repeat is sent again. */
export const RETRY_STATUSES: ReadonlySet<number> = new Set([429, 502, 503, 504]);
/** The longest ?wait= the API accepts, in seconds. */
export const WAIT_MAX_SECONDS = 60;

/** OutboxClient's settings. */
export interface OutboxClientConfig {
  /** backoffMs is the first retry's delay, doubled each time. Defaults to 200. */
  backoffMs?: number;
  /** fetch is the fetch to use. Defaults to globalThis.fetch. */
  fetch?: typeof globalThis.fetch;
  /** retries is how often a safe request is sent again. Defaults to 3. */
  retries?: number;
  /** timeoutMs is one request's deadline (a wait's adds its wait). Defaults to 10000. */
  timeoutMs?: number;
  /** token is the bearer token, which picks the namespace and role. Defaults to none. */
  token?: string;
  /** url is where outboxd serves. Defaults to http://127.0.0.1:8080. */
  url?: string;
}

/** enqueue's input over HTTP. */
export interface HTTPEnqueueParams {
  key: string;
  effect: string;
  args: Record<string, unknown>;
  requestedBy?: string;
  requireApproval?: boolean;
  /** "model" for a key a model chose: the server guards it (PossibleDuplicateError). */
  keySource?: "model";
  /** With keySource "model", confirms a second identical action. */
  newAction?: boolean;
}

/** The effects the server runs, as GET /v1/effects answers. */
export type EffectsAnswer = components["schemas"]["EffectsAnswer"];

type Answer = { data?: unknown; error?: unknown; response: Response };

/**
 * A client of outbox's HTTP API for one bearer token.
 *
 * Requests that are safe to repeat are retried, with backoff, on a network
 * error, a timeout, 429, 502, 503 and 504: reads (get, wait, list), and
 * enqueue, because it carries its Idempotency-Key, so that a repeat of an
 * enqueue that did reach the server is answered as a duplicate (an answer,
 * never an error). cancel, resolve, approve and deny are sent once: a
 * repeat of one that took effect would be refused.
 */
export class OutboxClient {
  readonly url: string;
  readonly token?: string;
  private readonly api: ReturnType<typeof createClient<paths>>;
  private readonly retries: number;
  private readonly backoffMs: number;
  private readonly timeoutMs: number;

  constructor(config: OutboxClientConfig = {}) {
    this.url = (config.url ?? "http://127.0.0.1:8080").replace(/\/+$/, "");
    this.token = config.token;
    this.retries = config.retries ?? 3;
    this.backoffMs = config.backoffMs ?? 200;
    this.timeoutMs = config.timeoutMs ?? 10_000;
    const f = config.fetch ?? globalThis.fetch;
    this.api = createClient<paths>({
      baseUrl: this.url,
      headers: this.token ? { Authorization: `Bearer ${this.token}` } : {},
      fetch: (req: Request) => f(req),
    });
  }

  private async send(retry: boolean, timeoutMs: number, call: (signal: AbortSignal) => Promise<Answer>): Promise<Answer> {
    for (let attempt = 0; ; attempt++) {
      let answer: Answer;
      try {
        answer = await call(AbortSignal.timeout(timeoutMs));
      } catch (e) {
        // A network error or our own timeout: the request may or may not
        // have reached the server.
        if (!retry || attempt >= this.retries) throw e;
        await this.sleep(attempt, null);
        continue;
      }
      if (retry && RETRY_STATUSES.has(answer.response.status) && attempt < this.retries) {
        await this.sleep(attempt, answer.response.headers.get("Retry-After"));
        continue;
      }
      return answer;
    }
  }

  private sleep(attempt: number, retryAfter: string | null): Promise<void> {
    let ms = this.backoffMs * 2 ** attempt * (0.5 + Math.random());
    const s = retryAfter === null ? NaN : Number(retryAfter);
    if (Number.isFinite(s)) ms = Math.max(ms, Math.min(s, 30) * 1000);
    return new Promise((resolve) => setTimeout(resolve, ms));
  }

  private intent(answer: Answer): Intent {
    if (answer.error !== undefined || !answer.response.ok) throw fromHTTP(answer.response.status, answer.error);
    return answer.data as Intent;
  }

  /**
   * POST /v1/intents under the Idempotency-Key key. Answers the new intent,
   * or the first one with duplicate true; throws KeyReusedError (with the
   * existing intent, read after the refusal) for another action under key.
   */
  async enqueue(p: HTTPEnqueueParams): Promise<EnqueueResult> {
    const answer = await this.send(true, this.timeoutMs, (signal) =>
      this.api.POST("/v1/intents", {
        params: { header: { "Idempotency-Key": p.key, ...(p.keySource ? { "Idempotency-Key-Source": p.keySource } : {}) } },
        body: {
          effect: p.effect,
          args: p.args as Record<string, never>,
          ...(p.requestedBy !== undefined ? { requested_by: p.requestedBy } : {}),
          ...(p.requireApproval ? { require_approval: true } : {}),
          ...(p.newAction ? { new_action: true } : {}),
        },
        signal,
      }),
    );
    if (answer.data) {
      const { duplicate, ...intent } = answer.data as components["schemas"]["EnqueueAnswer"];
      return { intent: intent as Intent, duplicate: Boolean(duplicate) };
    }
    const err = fromHTTP(answer.response.status, answer.error);
    if (err instanceof KeyReusedError) {
      try {
        err.existing = await this.get(p.key);
      } catch (e) {
        if (!(e instanceof OutboxError)) throw e;
      }
    }
    throw err;
  }

  /** GET /v1/intents/{key}: the intent now. */
  async get(key: string): Promise<Intent> {
    return this.intent(await this.send(true, this.timeoutMs, (signal) =>
      this.api.GET("/v1/intents/{key}", { params: { path: { key } }, signal })));
  }

  /**
   * The intent once it is terminal, or as it is after timeoutMs (check
   * isTerminal): long polls of at most 60 s each (?wait=). An intent
   * awaiting approval waits for a person.
   */
  async wait(key: string, timeoutMs = 30_000): Promise<Intent> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const wait = Math.max(0, Math.min(WAIT_MAX_SECONDS, Math.floor((deadline - Date.now()) / 1000)));
      const intent = this.intent(await this.send(true, wait * 1000 + this.timeoutMs, (signal) =>
        this.api.GET("/v1/intents/{key}", { params: { path: { key }, query: { wait: `${wait}s` } }, signal })));
      if (isTerminal(intent) || Date.now() >= deadline - 500) return intent;
    }
  }

  /** GET /v1/intents, newest first, every page: follows next_cursor. */
  async *list(filter: { state?: string | string[]; effect?: string; limit?: number } = {}): AsyncGenerator<Intent> {
    let cursor: string | undefined;
    const state = Array.isArray(filter.state) ? filter.state.join(",") : filter.state;
    do {
      const answer = await this.send(true, this.timeoutMs, (signal) =>
        this.api.GET("/v1/intents", { params: { query: { state, effect: filter.effect, limit: filter.limit, cursor } }, signal }));
      if (!answer.data) throw fromHTTP(answer.response.status, answer.error);
      const page = answer.data as components["schemas"]["ListAnswer"];
      for (const intent of page.intents) yield intent as Intent;
      cursor = page.next_cursor ?? undefined;
    } while (cursor);
  }

  /** POST /v1/intents/{key}/cancel (NotCancellableError once an attempt may have reached the provider). */
  async cancel(key: string, note?: string): Promise<Intent> {
    return this.intent(await this.send(false, this.timeoutMs, (signal) =>
      this.api.POST("/v1/intents/{key}/cancel", { params: { path: { key } }, body: note ? { note } : undefined, signal })));
  }

  /** POST /v1/intents/{key}/resolve: an operator's decision on an unknown intent. */
  async resolve(key: string, outcome: "succeeded" | "failed" | "retry", note = ""): Promise<Intent> {
    return this.intent(await this.send(false, this.timeoutMs, (signal) =>
      this.api.POST("/v1/intents/{key}/resolve", { params: { path: { key } }, body: { outcome, note }, signal })));
  }

  /** POST /v1/intents/{key}/approve, naming the args shown to the person by their args_sha256. */
  async approve(key: string, argsSHA256: string, note = ""): Promise<Intent> {
    return this.intent(await this.send(false, this.timeoutMs, (signal) =>
      this.api.POST("/v1/intents/{key}/approve", { params: { path: { key } }, body: { args_sha256: argsSHA256, note }, signal })));
  }

  /** POST /v1/intents/{key}/deny: the intent ends cancelled. */
  async deny(key: string, argsSHA256: string, note = ""): Promise<Intent> {
    return this.intent(await this.send(false, this.timeoutMs, (signal) =>
      this.api.POST("/v1/intents/{key}/deny", { params: { path: { key } }, body: { args_sha256: argsSHA256, note }, signal })));
  }

  /** GET /v1/effects: the enabled effects and their args schemas. */
  async effects(): Promise<EffectsAnswer> {
    const answer = await this.send(true, this.timeoutMs, (signal) => this.api.GET("/v1/effects", { signal }));
    if (!answer.data) throw fromHTTP(answer.response.status, answer.error);
    return answer.data as EffectsAnswer;
  }
}
