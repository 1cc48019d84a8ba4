/** How the stand-in's network hands a container's request to the test Worker (shared by the Node and workerd halves). */
export const STANDIN_OUTBOUND_PATH = "/__standin/outbound";
/** The Durable Object id whose container sent the request. */
export const STANDIN_CONTAINER_HEADER = "x-standin-container";
/** The request's original URL (`https://` for intercepted TLS). */
export const STANDIN_URL_HEADER = "x-standin-url";
