import { describe, expect, it } from "vitest";
import {
  AUDIT_ARCH_VALUES,
  CLONE_NAMESPACE_FLAGS,
  DENIED_SYSCALLS,
  evaluateSeccomp,
  SECCOMP_RET_ALLOW,
  SECCOMP_RET_ERRNO,
  seccompInstructions,
  seccompProgram,
} from "./seccomp.ts";

const EPERM = SECCOMP_RET_ERRNO | 1;
const ENOSYS = SECCOMP_RET_ERRNO | 38;
const SIGCHLD = 17;
const CLONE_VM = 0x100;
const CLONE_THREAD = 0x10000;

describe("seccomp program", () => {
  for (const arch of ["x64", "arm64"] as const) {
    const insns = seccompInstructions(arch);
    const call = (nr: number, arg0 = 0) => evaluateSeccomp(insns, { arch: AUDIT_ARCH_VALUES[arch], nr, arg0 });

    it(`${arch}: refuses every listed call with EPERM and allows the rest`, () => {
      for (const [name, numbers] of Object.entries(DENIED_SYSCALLS)) expect(call(numbers[arch]), name).toBe(EPERM);
      // read, write, openat, close, exit_group on each architecture.
      const harmless = arch === "x64" ? [0, 1, 257, 3, 231] : [63, 64, 56, 57, 94];
      for (const nr of harmless) expect(call(nr)).toBe(SECCOMP_RET_ALLOW);
    });

    it(`${arch}: clone is allowed for threads and forks but not for namespaces; clone3 gets ENOSYS`, () => {
      const clone = arch === "x64" ? 56 : 220;
      expect(call(clone, SIGCHLD)).toBe(SECCOMP_RET_ALLOW);
      expect(call(clone, CLONE_VM | CLONE_THREAD | SIGCHLD)).toBe(SECCOMP_RET_ALLOW);
      expect(call(clone, SIGCHLD | 0x10000000)).toBe(EPERM); // CLONE_NEWUSER
      expect(call(clone, SIGCHLD | 0x20000)).toBe(EPERM); // CLONE_NEWNS
      expect(call(clone, CLONE_NAMESPACE_FLAGS)).toBe(EPERM);
      expect(call(435)).toBe(ENOSYS);
    });

    it(`${arch}: refuses calls from another ABI`, () => {
      expect(evaluateSeccomp(insns, { arch: 0x40000003, nr: 0 })).toBe(EPERM); // i386
    });
  }

  it("x64: refuses x32 calls and the x86-only port I/O calls", () => {
    const insns = seccompInstructions("x64");
    expect(evaluateSeccomp(insns, { arch: AUDIT_ARCH_VALUES.x64, nr: 0x40000000 | 0 })).toBe(EPERM);
    expect(evaluateSeccomp(insns, { arch: AUDIT_ARCH_VALUES.x64, nr: 172 })).toBe(EPERM); // iopl
  });

  it("serializes as struct sock_filter (8 bytes each, little-endian) and refuses unsupported hosts", () => {
    const bytes = seccompProgram("x64");
    const insns = seccompInstructions("x64");
    expect(bytes?.length).toBe(insns.length * 8);
    expect(bytes?.readUInt16LE(0)).toBe(insns[0]?.code);
    expect(bytes?.readUInt32LE(4)).toBe(insns[0]?.k);
    expect(seccompProgram("riscv64")).toBeNull();
  });
});
