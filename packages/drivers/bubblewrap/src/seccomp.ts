/**
 * A small seccomp denylist as a classic-BPF program, generated here so the
 * driver needs no libseccomp. bwrap loads it (`--seccomp FD`) right before it
 * executes the sandboxed command, so bwrap's own namespace setup is not
 * affected.
 *
 * The filter (evaluated by the kernel on every system call):
 * 1. a call from another ABI than the host's (i386 via `int 0x80`, x32) is
 *    refused with EPERM: the numbers below mean something else there;
 * 2. calls that only a host administrator needs (mount, kexec, modules,
 *    ptrace, bpf, keyrings, clock setting, swap, reboot, io_uring...) fail
 *    with EPERM;
 * 3. `unshare`/`setns` fail with EPERM, `clone` with any CLONE_NEW* flag
 *    fails with EPERM, and `clone3` (whose flags live in memory a filter
 *    cannot read) fails with ENOSYS so libc falls back to `clone`;
 * 4. everything else is allowed.
 *
 * Only x86_64 and aarch64 (both little-endian) are supported; elsewhere
 * `seccompProgram` returns null and the driver declares seccomp absent.
 */

type Arch = "x64" | "arm64";

const AUDIT_ARCH: Record<Arch, number> = { x64: 0xc000003e, arm64: 0xc00000b7 };

/** Syscalls refused with EPERM, by name, with their numbers per architecture. */
export const DENIED_SYSCALLS: Record<string, Record<Arch, number>> = {
  ptrace: { x64: 101, arm64: 117 },
  mount: { x64: 165, arm64: 40 },
  umount2: { x64: 166, arm64: 39 },
  pivot_root: { x64: 155, arm64: 41 },
  chroot: { x64: 161, arm64: 51 },
  open_tree: { x64: 428, arm64: 428 },
  move_mount: { x64: 429, arm64: 429 },
  fsopen: { x64: 430, arm64: 430 },
  fsconfig: { x64: 431, arm64: 431 },
  fsmount: { x64: 432, arm64: 432 },
  fspick: { x64: 433, arm64: 433 },
  mount_setattr: { x64: 442, arm64: 442 },
  kexec_load: { x64: 246, arm64: 104 },
  kexec_file_load: { x64: 320, arm64: 294 },
  init_module: { x64: 175, arm64: 105 },
  finit_module: { x64: 313, arm64: 273 },
  delete_module: { x64: 176, arm64: 106 },
  reboot: { x64: 169, arm64: 142 },
  swapon: { x64: 167, arm64: 224 },
  swapoff: { x64: 168, arm64: 225 },
  acct: { x64: 163, arm64: 89 },
  settimeofday: { x64: 164, arm64: 170 },
  clock_settime: { x64: 227, arm64: 112 },
  adjtimex: { x64: 159, arm64: 171 },
  clock_adjtime: { x64: 305, arm64: 266 },
  bpf: { x64: 321, arm64: 280 },
  perf_event_open: { x64: 298, arm64: 241 },
  keyctl: { x64: 250, arm64: 219 },
  add_key: { x64: 248, arm64: 217 },
  request_key: { x64: 249, arm64: 218 },
  userfaultfd: { x64: 323, arm64: 282 },
  process_vm_readv: { x64: 310, arm64: 270 },
  process_vm_writev: { x64: 311, arm64: 271 },
  open_by_handle_at: { x64: 304, arm64: 265 },
  name_to_handle_at: { x64: 303, arm64: 264 },
  syslog: { x64: 103, arm64: 116 },
  quotactl: { x64: 179, arm64: 60 },
  lookup_dcookie: { x64: 212, arm64: 18 },
  vhangup: { x64: 153, arm64: 58 },
  io_uring_setup: { x64: 425, arm64: 425 },
  io_uring_enter: { x64: 426, arm64: 426 },
  io_uring_register: { x64: 427, arm64: 427 },
  unshare: { x64: 272, arm64: 97 },
  setns: { x64: 308, arm64: 268 },
};

/** x86_64 only: port I/O and obsolete module calls that have no aarch64 number. */
const DENIED_X64_ONLY: Record<string, number> = { iopl: 172, ioperm: 173, uselib: 134, create_module: 174, nfsservctl: 180 };

const CLONE: Record<Arch, number> = { x64: 56, arm64: 220 };
const CLONE3 = 435;
/**
 * CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET.
 * (CLONE_NEWTIME exists only for clone3/unshare; in clone(2) its bit is part
 * of the exit-signal byte.)
 */
export const CLONE_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000;

const X32_SYSCALL_BIT = 0x40000000;
const EPERM = 1;
const ENOSYS = 38;
export const SECCOMP_RET_ALLOW = 0x7fff0000;
export const SECCOMP_RET_ERRNO = 0x00050000;

// Classic BPF opcodes (linux/filter.h).
const LD_W_ABS = 0x20;
const JEQ_K = 0x15;
const JGE_K = 0x35;
const JSET_K = 0x45;
const RET_K = 0x06;

// struct seccomp_data offsets: nr (int), arch (u32), instruction_pointer (u64), args[6] (u64).
const OFFSET_NR = 0;
const OFFSET_ARCH = 4;
/** Low 32 bits of args[0] on a little-endian host (all flags of clone(2) live there). */
const OFFSET_ARG0_LOW = 16;

export interface BpfInstruction {
  code: number;
  jt: number;
  jf: number;
  k: number;
}

type Jump = number | string;
interface Pending {
  code: number;
  jt: Jump;
  jf: Jump;
  k: number;
}

/** Builds a program with symbolic jump targets, resolved to relative offsets at the end. */
class Assembler {
  readonly #code: Pending[] = [];
  readonly #labels = new Map<string, number>();
  label(name: string): void {
    this.#labels.set(name, this.#code.length);
  }
  emit(code: number, k: number, jt: Jump = 0, jf: Jump = 0): void {
    this.#code.push({ code, jt, jf, k });
  }
  assemble(): BpfInstruction[] {
    return this.#code.map((insn, pc) => ({ code: insn.code, k: insn.k, jt: this.#offset(insn.jt, pc), jf: this.#offset(insn.jf, pc) }));
  }
  #offset(target: Jump, pc: number): number {
    if (typeof target === "number") return target;
    const at = this.#labels.get(target);
    if (at === undefined) throw new Error(`seccomp: unknown label ${target}`);
    const offset = at - pc - 1;
    // Conditional jumps are 8-bit and forward-only.
    if (offset < 0 || offset > 255) throw new Error(`seccomp: jump to ${target} out of range (${offset})`);
    return offset;
  }
}

export function seccompArch(arch: string = process.arch): Arch | null {
  return arch === "x64" || arch === "arm64" ? arch : null;
}

export function seccompInstructions(arch: Arch): BpfInstruction[] {
  const asm = new Assembler();
  asm.emit(LD_W_ABS, OFFSET_ARCH);
  asm.emit(JEQ_K, AUDIT_ARCH[arch], 0, "deny");
  asm.emit(LD_W_ABS, OFFSET_NR);
  if (arch === "x64") asm.emit(JGE_K, X32_SYSCALL_BIT, "deny", 0);
  const numbers = Object.values(DENIED_SYSCALLS).map((byArch) => byArch[arch]);
  if (arch === "x64") numbers.push(...Object.values(DENIED_X64_ONLY));
  for (const nr of numbers) asm.emit(JEQ_K, nr, "deny", 0);
  asm.emit(JEQ_K, CLONE3, "enosys", 0);
  asm.emit(JEQ_K, CLONE[arch], 0, "allow");
  asm.emit(LD_W_ABS, OFFSET_ARG0_LOW);
  asm.emit(JSET_K, CLONE_NAMESPACE_FLAGS, "deny", "allow");
  asm.label("allow");
  asm.emit(RET_K, SECCOMP_RET_ALLOW);
  asm.label("deny");
  asm.emit(RET_K, SECCOMP_RET_ERRNO | EPERM);
  asm.label("enosys");
  asm.emit(RET_K, SECCOMP_RET_ERRNO | ENOSYS);
  return asm.assemble();
}

/** The program as `struct sock_filter[]` bytes (what bwrap reads from `--seccomp FD`), or null on an unsupported host. */
export function seccompProgram(arch: string = process.arch): Buffer | null {
  const supported = seccompArch(arch);
  // The offsets above assume a little-endian seccomp_data.
  if (supported === null || new Uint8Array(new Uint16Array([1]).buffer)[0] !== 1) return null;
  const insns = seccompInstructions(supported);
  const out = Buffer.alloc(insns.length * 8);
  insns.forEach((insn, i) => {
    out.writeUInt16LE(insn.code, i * 8);
    out.writeUInt8(insn.jt, i * 8 + 2);
    out.writeUInt8(insn.jf, i * 8 + 3);
    out.writeUInt32LE(insn.k >>> 0, i * 8 + 4);
  });
  return out;
}

/**
 * Runs the program the way the kernel would, for tests: returns the action
 * (`SECCOMP_RET_*` | data) for one system call.
 */
export function evaluateSeccomp(insns: readonly BpfInstruction[], call: { arch: number; nr: number; arg0?: number }): number {
  const word = (offset: number): number => {
    if (offset === OFFSET_NR) return call.nr >>> 0;
    if (offset === OFFSET_ARCH) return call.arch >>> 0;
    if (offset === OFFSET_ARG0_LOW) return (call.arg0 ?? 0) >>> 0;
    throw new Error(`unexpected load at ${offset}`);
  };
  let acc = 0;
  for (let pc = 0; pc < insns.length; pc++) {
    const insn = insns[pc] as BpfInstruction;
    switch (insn.code) {
      case LD_W_ABS:
        acc = word(insn.k);
        break;
      case JEQ_K:
        pc += acc === insn.k >>> 0 ? insn.jt : insn.jf;
        break;
      case JGE_K:
        pc += acc >= insn.k >>> 0 ? insn.jt : insn.jf;
        break;
      case JSET_K:
        pc += (acc & insn.k) !== 0 ? insn.jt : insn.jf;
        break;
      case RET_K:
        return insn.k >>> 0;
      default:
        throw new Error(`unexpected opcode ${insn.code}`);
    }
  }
  throw new Error("program fell off the end");
}

export const AUDIT_ARCH_VALUES = AUDIT_ARCH;
