#!/usr/bin/env -S node --import tsx
// Runs the TypeScript sources directly (tsx), so there is no build step.
import "../src/cli.ts";
