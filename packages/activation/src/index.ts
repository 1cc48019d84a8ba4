/** @openma/activation: acquire_then_session_poll (intent queue, activation worker, AWS MicroVM launcher). */
export * from "./aws-launcher.ts";
export * from "./intents.ts";
export * from "./vm-bundle.ts";
export * from "./work-activation.ts";
export * from "./worker.ts";
