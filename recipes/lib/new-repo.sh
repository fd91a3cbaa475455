# Sourced by the generated projects' make-repo.sh: a fresh repository in "$1" with fixed author,
# dates and an isolated git config, and `commit MESSAGE`, which commits everything on the next day
# of month "$4" (2024). Nothing here may change: the commit ids in each dataset.jsonl depend on it.
#   new_repo OUT "AUTHOR NAME" EMAIL MONTH
new_repo() {
  # a rerun (as a README reader's) finds what it made before: the same commits, so nothing to do
  if git -C "$1" rev-parse -q --verify HEAD >/dev/null 2>&1 && [ -z "$(git -C "$1" status --porcelain)" ]; then
    echo "make-repo.sh: $1 is already made (remove it to make it anew)" >&2
    exit 0
  fi
  if [ -e "$1" ]; then echo "make-repo.sh: $1 exists; remove it first" >&2; exit 1; fi
  mkdir -p "$1"
  cd "$1"
  export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 LC_ALL=C TZ=UTC
  export GIT_AUTHOR_NAME="$2" GIT_AUTHOR_EMAIL="$3"
  export GIT_COMMITTER_NAME="$2" GIT_COMMITTER_EMAIL="$3"
  umask 022
  git init -q -b main .
  repo_month="$4"
  day=0
}

commit() {
  day=$((day + 1))
  export GIT_AUTHOR_DATE="2024-$repo_month-$(printf %02d "$day")T10:00:00+0000"
  export GIT_COMMITTER_DATE="$GIT_AUTHOR_DATE"
  git add -A
  git commit -q -m "$1"
}
