/**
 * The filesystem a sandbox sees, described once and used twice: as bwrap
 * arguments (for the long-lived init and for every exec, so all processes of
 * a runtime see the same tree) and as a mount table the host-side file
 * operations resolve sandbox paths against.
 *
 * Two bases:
 * - host: the host's `/usr` read-only plus its `/bin`, `/lib*` symlinks (or
 *   read-only binds where they are real directories), and a curated `/etc`:
 *   only files a program needs to run (dynamic linker cache, CA
 *   certificates, alternatives, time zone), never the host's passwd, shadow,
 *   SSH or TLS private keys. passwd/group/hosts/hostname are synthesized.
 * - rootfs: every top-level entry of a dedicated root filesystem directory
 *   (e.g. `/var/lib/openma/rootfs/<tag>`), read-only, its `/etc` included.
 *
 * On top of either: a fresh `/proc` and `/dev`, a private writable `/tmp`
 * (a per-runtime host directory, so it is shared by the runtime's processes
 * and removed with the runtime), `/workspace` and `/mnt/session/outputs` bound
 * read-write from the binding directories, and optional extra binds.
 */
import { lstatSync, readdirSync, readlinkSync, statSync } from "node:fs";
import { join } from "node:path";
import { OUTPUTS_MOUNT_PATH, WORKSPACE_MOUNT_PATH } from "@openma/contract";

export type MountEntry =
  | { kind: "bind"; target: string; source: string; writable: boolean; type: "dir" | "file" }
  | { kind: "symlink"; target: string; link: string };

export interface ExtraBind {
  /** Absolute host path (file or directory). */
  source: string;
  /** Absolute sandbox path; must not shadow /proc, /dev, /tmp, /workspace or the outputs mount. */
  target: string;
  writable?: boolean;
}

/** Host `/etc` entries a sandboxed program may need; everything else in the host's `/etc` stays invisible. */
export const HOST_ETC_ALLOWLIST = [
  "alternatives",
  "ca-certificates",
  "ld.so.cache",
  "ld.so.conf",
  "ld.so.conf.d",
  "localtime",
  "mime.types",
  "nsswitch.conf",
  "os-release",
  "protocols",
  "services",
  "ssl/certs",
] as const;

/** Top-level host entries that hold programs and libraries (usually symlinks into /usr on merged-/usr systems). */
const HOST_LIB_LINKS = ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] as const;

/** Rootfs entries the sandbox gets from elsewhere (kernel filesystems, private dirs, bindings) or that are not part of the image. */
const ROOTFS_SKIP = new Set(["proc", "dev", "sys", "tmp", "workspace", "mnt", "run", "lost+found"]);

/** Paths a binding or extra bind must never shadow. */
const RESERVED = ["/proc", "/dev", "/tmp", WORKSPACE_MOUNT_PATH, OUTPUTS_MOUNT_PATH];

function entryOf(source: string, target: string): MountEntry | null {
  let st: ReturnType<typeof lstatSync>;
  try {
    st = lstatSync(source);
  } catch {
    return null;
  }
  if (st.isSymbolicLink()) return { kind: "symlink", target, link: readlinkSync(source) };
  if (st.isDirectory()) return { kind: "bind", target, source, writable: false, type: "dir" };
  return { kind: "bind", target, source, writable: false, type: "file" };
}

/** The read-only base (programs, libraries, configuration) for a host `/usr` or a rootfs directory. */
export function baseLayout(rootfs: string | null, etcDir: string): MountEntry[] {
  const entries: MountEntry[] = [];
  if (rootfs !== null) {
    for (const name of readdirSync(rootfs).sort()) {
      if (name.startsWith(".") || ROOTFS_SKIP.has(name)) continue;
      const entry = entryOf(join(rootfs, name), `/${name}`);
      if (entry) entries.push(entry);
    }
    return entries;
  }
  entries.push({ kind: "bind", target: "/usr", source: "/usr", writable: false, type: "dir" });
  for (const name of HOST_LIB_LINKS) {
    const entry = entryOf(`/${name}`, `/${name}`);
    if (entry) entries.push(entry);
  }
  for (const name of HOST_ETC_ALLOWLIST) {
    const source = `/etc/${name}`;
    // bwrap follows a symlinked source, so the entry's type is the target's; a dangling link is skipped.
    let st: ReturnType<typeof statSync>;
    try {
      st = statSync(source);
    } catch {
      continue;
    }
    entries.push({ kind: "bind", target: source, source, writable: false, type: st.isDirectory() ? "dir" : "file" });
  }
  for (const name of ["passwd", "group", "hosts", "hostname"]) {
    entries.push({ kind: "bind", target: `/etc/${name}`, source: join(etcDir, name), writable: false, type: "file" });
  }
  return entries;
}

export interface RuntimeMounts {
  tmpDir: string;
  workspace: string;
  outputs: string | null;
  extra: readonly ExtraBind[];
}

/** Base plus the runtime's private and bound directories, in mount order (later entries mount over earlier ones). */
export function runtimeLayout(base: readonly MountEntry[], mounts: RuntimeMounts): MountEntry[] {
  const entries: MountEntry[] = [...base];
  entries.push({ kind: "bind", target: "/tmp", source: mounts.tmpDir, writable: true, type: "dir" });
  entries.push({ kind: "bind", target: WORKSPACE_MOUNT_PATH, source: mounts.workspace, writable: true, type: "dir" });
  if (mounts.outputs !== null) {
    entries.push({ kind: "bind", target: OUTPUTS_MOUNT_PATH, source: mounts.outputs, writable: true, type: "dir" });
  }
  for (const bind of mounts.extra) {
    const st = statSync(bind.source);
    entries.push({
      kind: "bind",
      target: bind.target,
      source: bind.source,
      writable: bind.writable === true,
      type: st.isDirectory() ? "dir" : "file",
    });
  }
  return entries;
}

/** Problems with an extra bind (empty when usable). */
export function extraBindIssues(bind: ExtraBind): string[] {
  const issues: string[] = [];
  if (!bind.source.startsWith("/")) issues.push(`binds: source ${JSON.stringify(bind.source)} must be absolute`);
  if (!isCleanAbsolute(bind.target)) issues.push(`binds: target ${JSON.stringify(bind.target)} must be a normalized absolute path`);
  else if (RESERVED.some((reserved) => bind.target === reserved || reserved.startsWith(`${bind.target}/`) || bind.target === "/")) {
    issues.push(`binds: target ${bind.target} would shadow a sandbox mount`);
  }
  return issues;
}

export function isCleanAbsolute(path: string): boolean {
  if (!path.startsWith("/") || path.includes("\0")) return false;
  const parts = path.split("/").slice(1);
  return path === "/" || parts.every((part) => part !== "" && part !== "." && part !== "..");
}

/** bwrap arguments that build the layout (`--proc`/`--dev` first, so binds cannot hide them). */
export function layoutArgs(entries: readonly MountEntry[]): string[] {
  const args = ["--proc", "/proc", "--dev", "/dev"];
  for (const entry of entries) {
    if (entry.kind === "symlink") args.push("--symlink", entry.link, entry.target);
    else args.push(entry.writable ? "--bind" : "--ro-bind", entry.source, entry.target);
  }
  return args;
}

/** passwd/group/hosts/hostname for the host base; no real account of the host appears in them. */
export function syntheticEtc(user: { uid: number; gid: number }, hostname: string): Record<string, string> {
  const accounts =
    user.uid === 0
      ? "root:x:0:0:root:/tmp:/bin/sh\n"
      : `root:x:0:0:root:/root:/bin/sh\nsandbox:x:${user.uid}:${user.gid}:sandbox:/tmp:/bin/sh\n`;
  const groups = user.gid === 0 ? "root:x:0:\n" : `root:x:0:\nsandbox:x:${user.gid}:\n`;
  return {
    passwd: `${accounts}nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n`,
    group: `${groups}nogroup:x:65534:\n`,
    hosts: `127.0.0.1\tlocalhost ${hostname}\n::1\tlocalhost ip6-localhost ip6-loopback\n`,
    hostname: `${hostname}\n`,
  };
}
