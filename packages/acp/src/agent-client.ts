/**
 * One ACP child, driven through the official SDK's client app.
 *
 * The unstable entry is imported on purpose: `PromptResponse.usage` is an
 * unstable field, and the stable parser strips it.
 *
 * Spawning goes through `AcpSpawn` (our process port), so this package never
 * decides where the child runs: the supervisor inside a sandbox hands a
 * node child_process; a test may hand anything with byte streams.
 */
import * as acp from "@agentclientprotocol/sdk/unstable";

export type { PromptResponse, SessionNotification, SessionUpdate } from "@agentclientprotocol/sdk/unstable";

export interface AcpChildProcess {
  stdin: WritableStream<Uint8Array>;
  stdout: ReadableStream<Uint8Array>;
  /** SIGKILL to the child; resolves once delivered. */
  kill(): Promise<void>;
  /** Settles once the child is gone. */
  exited: Promise<{ exitCode: number | null; signal: string | null }>;
}

export interface AcpSpawnInput {
  command: string;
  args: readonly string[];
  cwd: string;
  env: Readonly<Record<string, string>>;
}

export type AcpSpawn = (input: AcpSpawnInput) => AcpChildProcess | Promise<AcpChildProcess>;

export class AcpResumeError extends Error {
  override name = "AcpResumeError";
}

export type AcpOpenMode = "new" | "resume" | "load";

export interface AcpClientHooks {
  /** Every `session/update` after the session is open (replays of `session/load` are dropped). */
  onUpdate?: (notification: acp.SessionNotification) => void;
  /** Chooses an option id for `session/request_permission`; default: the first allow option. */
  choosePermission?: (request: acp.RequestPermissionRequest) => string | null;
}

const CLIENT_INFO = { name: "openma", version: "0.1.0" };

function defaultPermission(request: acp.RequestPermissionRequest): string | null {
  const allow = request.options.find((o) => o.kind === "allow_once") ?? request.options.find((o) => o.kind === "allow_always");
  return allow?.optionId ?? null;
}

export class AcpAgentClient {
  private replaying = false;
  private capabilities: acp.AgentCapabilities = {};

  private constructor(
    private readonly child: AcpChildProcess,
    private readonly connection: acp.ClientConnection,
  ) {}

  /** Spawns the child, connects, and sends `initialize`. */
  static async start(spawn: AcpSpawn, input: AcpSpawnInput, hooks: AcpClientHooks = {}): Promise<AcpAgentClient> {
    const child = await spawn(input);
    let self: AcpAgentClient | null = null;
    const app = acp
      .client()
      .onNotification(acp.methods.client.session.update, (ctx) => {
        if (self && !self.replaying) hooks.onUpdate?.(ctx.params);
      })
      .onRequest(acp.methods.client.session.requestPermission, (ctx) => {
        const optionId = (hooks.choosePermission ?? defaultPermission)(ctx.params);
        return optionId ? { outcome: { outcome: "selected", optionId } } : { outcome: { outcome: "cancelled" } };
      });
    const connection = app.connect(acp.ndJsonStream(child.stdin, child.stdout));
    // A dead child closes the connection with an error; pending requests carry it to their callers.
    connection.closed.catch(() => {});
    self = new AcpAgentClient(child, connection);
    try {
      const init = await connection.agent.request<acp.InitializeResponse>(acp.methods.agent.initialize, {
        protocolVersion: acp.PROTOCOL_VERSION,
        clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
        clientInfo: CLIENT_INFO,
      });
      self.capabilities = init.agentCapabilities ?? {};
    } catch (error) {
      await self.dispose();
      throw error;
    }
    return self;
  }

  get agentCapabilities(): acp.AgentCapabilities {
    return this.capabilities;
  }

  get exited(): AcpChildProcess["exited"] {
    return this.child.exited;
  }

  /** Whether this agent can continue a stored session at all. */
  canContinue(): boolean {
    return Boolean(this.capabilities.sessionCapabilities?.resume) || this.capabilities.loadSession === true;
  }

  async newSession(cwd: string): Promise<string> {
    const res = await this.connection.agent.request(acp.methods.agent.session.new, { cwd, mcpServers: [] });
    return res.sessionId;
  }

  /**
   * `session/resume` when advertised, else `session/load` (its history replay
   * is dropped: that output was already published). Throws AcpResumeError when
   * the agent can do neither or refuses the id.
   */
  async continueSession(sessionId: string, cwd: string): Promise<AcpOpenMode> {
    const caps = this.capabilities;
    try {
      if (caps.sessionCapabilities?.resume) {
        await this.connection.agent.request(acp.methods.agent.session.resume, { sessionId, cwd, mcpServers: [] });
        return "resume";
      }
      if (caps.loadSession) {
        this.replaying = true;
        try {
          await this.connection.agent.request(acp.methods.agent.session.load, { sessionId, cwd, mcpServers: [] });
        } finally {
          this.replaying = false;
        }
        return "load";
      }
    } catch (error) {
      throw new AcpResumeError(`the agent refused to continue session ${sessionId}: ${(error as Error).message}`);
    }
    throw new AcpResumeError("the agent supports neither session/resume nor session/load");
  }

  prompt(sessionId: string, prompt: acp.ContentBlock[]): Promise<acp.PromptResponse> {
    return this.connection.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt });
  }

  async cancel(sessionId: string): Promise<void> {
    await this.connection.agent.notify(acp.methods.agent.session.cancel, { sessionId });
  }

  /** `session/close` when advertised; a no-op otherwise. */
  async close(sessionId: string): Promise<void> {
    if (!this.capabilities.sessionCapabilities?.close) return;
    await this.connection.agent.request(acp.methods.agent.session.close, { sessionId });
  }

  /** Closes the connection and kills the child (idempotent). */
  async dispose(): Promise<void> {
    this.connection.close();
    await this.child.kill();
    await this.child.exited;
  }
}
