/** @openma/standin-aws-microvms: an AWS Lambda MicroVMs stand-in (REST-JSON, SigV4) over real local sandboxes. */
export * from "./microvms.ts";
export * from "./server.ts";
export * from "./sigv4.ts";
