/**
 * Where the node-docker driver keeps the files of the shell programs it runs
 * (`@openma/driver-kit/sh-programs`): a tmpfs in every container.
 */

/** tmpfs mounted in every container: pid files and secret files, never in the image or in `docker inspect`. */
export const RUNTIME_DIR = "/run/openma";
export const PID_DIR = `${RUNTIME_DIR}/exec`;
export const SECRET_DIR = `${RUNTIME_DIR}/secrets`;
