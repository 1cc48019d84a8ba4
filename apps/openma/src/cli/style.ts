/** Colors for people, plain text for pipes: node:util styleText, switched on only when stdout is a TTY (and NO_COLOR is unset). */
import { styleText } from "node:util";
import type { CliIo } from "./client.ts";

type Format = Parameters<typeof styleText>[0];

export type Paint = (format: Format, text: string) => string;

export function painter(io: CliIo): Paint {
  const color = io.stdout.isTTY === true && !io.env.NO_COLOR;
  return color ? (format, text) => styleText(format, text, { validateStream: false }) : (_format, text) => text;
}
