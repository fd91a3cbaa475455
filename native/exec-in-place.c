/*
 * exec-in-place: a node addon with one function, execve(file, argv, env), which replaces the
 * calling node process with `file` (Node 20 has no process.execve). The CLI's one-shot run hands
 * its prepared sandbox to the launcher this way (sandbox/run-in-place.ts): no fork of node, no
 * node waiting beside the command, no node exit after it, on every run.
 *
 * What exec keeps that a spawned child would not have, put as libuv puts it for a child: signals
 * node ignores (SIGPIPE) stay ignored and its signal mask stays, so both are reset; node marks
 * stdin, stdout and stderr close-on-exec and may have made them non-blocking, so they are
 * inherited and blocking; interval timers are disarmed; under node's CPU profiler, SIGPROF is
 * left ignored (see there). node's other descriptors are close-on-exec. Returns only on failure, by
 * throwing an Error with the errno's code, with all of it as it was.
 */
#include <errno.h>
#include <fcntl.h>
#include <node_api.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

static char *string_of(napi_env env, napi_value v) {
  size_t n;
  if (napi_get_value_string_utf8(env, v, NULL, 0, &n) != napi_ok) return NULL;
  char *s = malloc(n + 1);
  if (s == NULL || napi_get_value_string_utf8(env, v, s, n + 1, &n) != napi_ok) return NULL;
  return s;
}

/* A NULL-terminated copy of an array of strings, or NULL if it is not one. */
static char **strings_of(napi_env env, napi_value a) {
  uint32_t n;
  if (napi_get_array_length(env, a, &n) != napi_ok) return NULL;
  char **out = calloc((size_t)n + 1, sizeof *out);
  if (out == NULL) return NULL;
  for (uint32_t i = 0; i < n; i++) {
    napi_value e;
    if (napi_get_element(env, a, i, &e) != napi_ok || (out[i] = string_of(env, e)) == NULL) return NULL;
  }
  return out;
}

static napi_value exec_in_place(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value args[3];
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) != napi_ok || argc != 3) {
    napi_throw_type_error(env, NULL, "execve(file, argv, env) takes a path and two arrays of strings");
    return NULL;
  }
  char *file = string_of(env, args[0]);
  char **argv = strings_of(env, args[1]);
  char **envp = strings_of(env, args[2]);
  if (file == NULL || argv == NULL || envp == NULL || argv[0] == NULL) {
    napi_throw_type_error(env, NULL, "execve(file, argv, env) takes a path and two arrays of strings");
    return NULL;
  }
  sigset_t mask;
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, &mask);
  struct sigaction ignored[NSIG];
  int was_ignored[NSIG] = {0};
  for (int s = 1; s < NSIG; s++) {
    if (sigaction(s, NULL, &ignored[s]) == 0 && ignored[s].sa_handler == SIG_IGN) {
      was_ignored[s] = 1;
      signal(s, SIG_DFL);
    }
  }
  /* interval timers outlive exec: none for the new program */
  struct itimerval timers[3], off = {{0, 0}, {0, 0}};
  const int which[3] = {ITIMER_REAL, ITIMER_VIRTUAL, ITIMER_PROF};
  for (int i = 0; i < 3; i++) setitimer(which[i], &off, &timers[i]);
  int fd_flags[3], fl_flags[3];
  for (int fd = 0; fd < 3; fd++) {
    fd_flags[fd] = fcntl(fd, F_GETFD);
    fl_flags[fd] = fcntl(fd, F_GETFL);
    if (fd_flags[fd] >= 0) fcntl(fd, F_SETFD, fd_flags[fd] & ~FD_CLOEXEC);
    if (fl_flags[fd] >= 0) fcntl(fd, F_SETFL, fl_flags[fd] & ~O_NONBLOCK);
  }
  /*
   * node's CPU profiler (--cpu-prof) samples this thread with SIGPROF from a thread of its own; one
   * still pending at the exec would kill the new program (pending signals outlive exec, handlers
   * do not). Ignored from here, pending ones are dropped; the program starts with SIGPROF ignored
   * (sandbox-launch puts it back to the default first thing).
   */
  struct sigaction prof;
  int profiled = sigaction(SIGPROF, NULL, &prof) == 0 && prof.sa_handler != SIG_DFL && prof.sa_handler != SIG_IGN;
  if (profiled) signal(SIGPROF, SIG_IGN);
  execve(file, argv, envp);
  int err = errno;
  if (profiled) sigaction(SIGPROF, &prof, NULL);
  /* still node: as it was */
  for (int fd = 0; fd < 3; fd++) {
    if (fd_flags[fd] >= 0) fcntl(fd, F_SETFD, fd_flags[fd]);
    if (fl_flags[fd] >= 0) fcntl(fd, F_SETFL, fl_flags[fd]);
  }
  for (int s = 1; s < NSIG; s++)
    if (was_ignored[s]) sigaction(s, &ignored[s], NULL);
  sigprocmask(SIG_SETMASK, &mask, NULL);
  for (int i = 0; i < 3; i++) setitimer(which[i], &timers[i], NULL);
  napi_value code, message, error;
  napi_create_string_utf8(env, strerror(err), NAPI_AUTO_LENGTH, &message);
  napi_create_string_utf8(env, err == ENOENT ? "ENOENT" : err == EACCES ? "EACCES" : "EEXEC", NAPI_AUTO_LENGTH, &code);
  napi_create_error(env, code, message, &error);
  napi_throw(env, error);
  return NULL;
}

NAPI_MODULE_INIT() {
  napi_value fn;
  napi_create_function(env, "execve", NAPI_AUTO_LENGTH, exec_in_place, NULL, &fn);
  napi_set_named_property(env, exports, "execve", fn);
  return exports;
}
