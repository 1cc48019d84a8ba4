/**
 * The Worker's egress decision and substitution on their own (the end-to-end
 * evidence, in workerd with a real box, is test/cloud/cloudflare-egress.test.ts).
 */
import { describe, expect, it } from "vitest";
import { type EgressAudit, EgressConfigInput, egressFetch, prepareEgress, type StoredEgress } from "./egress.ts";

const SECRET = "s3cr3t-value";

function configured(overrides: Partial<EgressConfigInput> = {}) {
  return prepareEgress(
    EgressConfigInput.parse({
      networking: { type: "limited", allowed_hosts: ["api.example.com", "*.files.example.com", "plain.example.com"] },
      credentials: [
        {
          secret_name: "API_TOKEN",
          secret: SECRET,
          allowed_hosts: ["api.example.com", "*.files.example.com"],
          injection_location: { header: true, body: true },
        },
      ],
      ...overrides,
    }),
  );
}

/** Runs one request and returns what reached upstream (null when nothing left) plus the answer and audit. */
async function send(egress: StoredEgress | null, request: Request, maxBodyBytes?: number) {
  let sent: Request | null = null;
  const audit: EgressAudit[] = [];
  const response = await egressFetch(request, egress, {
    upstream: async (r) => {
      sent = r;
      return new Response("upstream");
    },
    onAudit: (e) => audit.push(e),
    ...(maxBodyBytes === undefined ? {} : { maxBodyBytes }),
  });
  return { sent: sent as Request | null, response, audit };
}

describe("prepareEgress", () => {
  it("mints a distinct random placeholder per call and never returns the secret", () => {
    const a = configured();
    const b = configured();
    expect(a.env.API_TOKEN).toMatch(/^openma-placeholder-api_token-[0-9a-f]{24}$/);
    expect(a.env.API_TOKEN).not.toBe(b.env.API_TOKEN);
    expect(JSON.stringify(a.env)).not.toContain(SECRET);
  });

  it("refuses names that would shadow the sandbox's plumbing, and duplicates", () => {
    const cred = { secret: "x", allowed_hosts: null, injection_location: { header: true, body: false } };
    expect(() => configured({ credentials: [{ ...cred, secret_name: "HTTPS_PROXY" }] })).toThrow(/cannot be a sandbox variable/);
    expect(() =>
      configured({
        credentials: [
          { ...cred, secret_name: "A" },
          { ...cred, secret_name: "A" },
        ],
      }),
    ).toThrow(/share secret_name/);
    expect(EgressConfigInput.safeParse({ networking: { type: "limited", allowed_hosts: [] }, credentials: [], extra: 1 }).success).toBe(
      false,
    );
  });
});

describe("egressFetch", () => {
  it("fails closed for a sandbox the control plane never configured", async () => {
    const { sent, response } = await send(null, new Request("https://api.example.com/"));
    expect(sent).toBeNull();
    expect(response.status).toBe(403);
    expect(await response.text()).toMatch(/^egress refused: this sandbox has no egress configuration/);
  });

  it("refuses a host outside limited networking with 403 and a reason, and audits it", async () => {
    const { stored } = configured();
    const { sent, response, audit } = await send(stored, new Request("https://evil.example.net/x"));
    expect(sent).toBeNull();
    expect(response.status).toBe(403);
    expect(await response.text()).toContain("host evil.example.net is not in the environment's allowed hosts");
    expect(audit).toEqual([expect.objectContaining({ type: "egress.denied", host: "evil.example.net" })]);
  });

  it("substitutes in headers and body for the credential's hosts (wildcards are strict subdomains)", async () => {
    const { stored, env } = configured();
    const placeholder = env.API_TOKEN as string;
    const { sent, audit } = await send(
      stored,
      new Request("https://a.files.example.com/up", {
        method: "POST",
        headers: { authorization: `Bearer ${placeholder}` },
        body: `k=${placeholder}&again=${placeholder}`,
      }),
    );
    expect(sent?.headers.get("authorization")).toBe(`Bearer ${SECRET}`);
    expect(await sent?.text()).toBe(`k=${SECRET}&again=${SECRET}`);
    expect(audit).toEqual([{ type: "egress.allowed", method: "POST", host: "a.files.example.com", credentials: ["API_TOKEN"] }]);
    expect(JSON.stringify(audit)).not.toContain(SECRET);
    // The bare domain is not a strict subdomain: not allowed by networking either.
    expect((await send(stored, new Request("https://files.example.com/"))).response.status).toBe(403);
  });

  it("lets the placeholder travel as is to an allowed host the credential does not cover", async () => {
    const { stored, env } = configured();
    const placeholder = env.API_TOKEN as string;
    const { sent } = await send(
      stored,
      new Request("http://plain.example.com/", { method: "POST", headers: { "x-token": placeholder }, body: placeholder }),
    );
    expect(sent?.headers.get("x-token")).toBe(placeholder);
    expect(await sent?.text()).toBe(placeholder);
  });

  it("honours injection_location: header only leaves the body alone", async () => {
    const { stored, env } = configured({
      credentials: [{ secret_name: "T", secret: SECRET, allowed_hosts: null, injection_location: { header: true, body: false } }],
      networking: { type: "unrestricted" },
    });
    const placeholder = env.T as string;
    const { sent } = await send(
      stored,
      new Request("https://anywhere.example.org/", { method: "PUT", headers: { "x-t": placeholder }, body: placeholder }),
    );
    expect(sent?.headers.get("x-t")).toBe(SECRET);
    expect(await sent?.text()).toBe(placeholder);
  });

  it("replaces bytes without re-encoding a binary body", async () => {
    const { stored, env } = configured();
    const placeholder = new TextEncoder().encode(env.API_TOKEN as string);
    const body = new Uint8Array([0xff, 0x00, ...placeholder, 0xfe]);
    const { sent } = await send(stored, new Request("https://api.example.com/", { method: "POST", body }));
    const got = new Uint8Array(await (sent as unknown as Request).arrayBuffer());
    expect([...got]).toEqual([0xff, 0x00, ...new TextEncoder().encode(SECRET), 0xfe]);
  });

  it("refuses a body too large to substitute in with 413", async () => {
    const { stored } = configured();
    const { sent, response } = await send(stored, new Request("https://api.example.com/", { method: "POST", body: "x".repeat(100) }), 10);
    expect(sent).toBeNull();
    expect(response.status).toBe(413);
  });
});
