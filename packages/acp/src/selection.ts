/**
 * Which ACP agent a Session runs (docs/acp.md "Selecting an agent", ADR 0033):
 * the metadata value `openma.acp_agent` on an agent or environment names a
 * known release, `<id>` or `<id>@<version>` (`codex-acp`,
 * `codex-acp@0.16.0`). Only releases in `KNOWN_AGENT_RELEASES` can be named:
 * their launch (entry point, ACP arguments, Node needs) is data we verified.
 *
 * `acpReleaseCatalog(cacheRoot)` is the API's port: `check` at agent and
 * environment writes (a name we cannot run is a 400 at once), `pin` at
 * session creation (the release must be installed in the agent cache, whose
 * lockfile gives the integrity the Session keeps).
 */
import {
  type AcpAgentRelease,
  agentCacheRoot,
  type InstalledAgentRelease,
  KNOWN_AGENT_RELEASES,
  readInstalled,
  releaseDir,
} from "./agent-cache.ts";

/** The metadata key that selects an ACP harness. */
export const ACP_AGENT_METADATA_KEY = "openma.acp_agent";

/** What a Session pins: resolved once, at creation, never changed after. */
export interface PinnedAcpRelease {
  id: string;
  package: string;
  version: string;
  /** The registry's SHA-512 integrity of the package tarball. */
  integrity: string;
}

export type AcpSelection = { ok: true; release: AcpAgentRelease } | { ok: false; error: string };

const known = () => KNOWN_AGENT_RELEASES.map((r) => `${r.id}@${r.version}`).join(", ");

/** The known release `value` names, or why it names none. */
export function parseAcpSelection(value: string): AcpSelection {
  const at = value.indexOf("@");
  const id = at < 0 ? value : value.slice(0, at);
  const version = at < 0 ? undefined : value.slice(at + 1);
  const byId = KNOWN_AGENT_RELEASES.filter((r) => r.id === id);
  if (byId.length === 0) return { ok: false, error: `unknown ACP agent ${JSON.stringify(id)}; known releases: ${known()}` };
  const release = version === undefined ? byId[0] : byId.find((r) => r.version === version);
  if (!release) {
    return { ok: false, error: `unknown release ${JSON.stringify(value)} of ACP agent ${JSON.stringify(id)}; known releases: ${known()}` };
  }
  return { ok: true, release };
}

export interface AcpReleaseCatalog {
  /** Null when `value` names a release this server knows; else why not. */
  check(value: string): string | null;
  /** The release as installed now (what a Session pins), or why it cannot be pinned. */
  pin(value: string): Promise<PinnedAcpRelease | { error: string }>;
  /** The installed release a pinned Session runs, or null when the cache no longer holds exactly that tarball. */
  installed(pinned: PinnedAcpRelease): Promise<InstalledAgentRelease | null>;
}

export function acpReleaseCatalog(cacheRoot = agentCacheRoot()): AcpReleaseCatalog {
  const installed = async (release: AcpAgentRelease) => readInstalled(release, releaseDir(cacheRoot, release));
  return {
    check: (value) => {
      const s = parseAcpSelection(value);
      return s.ok ? null : s.error;
    },
    async pin(value) {
      const s = parseAcpSelection(value);
      if (!s.ok) return { error: s.error };
      const found = await installed(s.release);
      if (!found) {
        return { error: `ACP agent ${s.release.package}@${s.release.version} is not installed in the agent cache ${cacheRoot}` };
      }
      return { id: s.release.id, package: s.release.package, version: s.release.version, integrity: found.integrity };
    },
    async installed(pinned) {
      const s = parseAcpSelection(`${pinned.id}@${pinned.version}`);
      if (!s.ok) return null;
      const found = await installed(s.release);
      return found && found.integrity === pinned.integrity ? found : null;
    },
  };
}
