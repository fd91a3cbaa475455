/**
 * The niceness the server gives its sandboxes' processes unless a create asks for another
 * (`serve --sandbox-nice`). Where processes compete one by one (no kernel autogroup: a systemd
 * host, where every service has a cgroup of its own), 128 busy sandboxes at the host's default
 * starved the server: `is_alive` took seconds (bench/serve.ts). At 10 each sandbox process weighs
 * about a tenth of the server, which an idle host never notices: the share only counts under
 * contention, so sandboxes still get every cycle the server leaves.
 */
export const DEFAULT_SANDBOX_NICE = 10;
