#!/usr/bin/env bash
# The man page embedscope(8), generated from the binary's own --help and --version
# (one source: what --help says is what the page says), like help2man but with no
# dependency beyond bash and awk.  usage: scripts/manpage.sh BIN SYSCONFDIR >embedscope.8
#
# --help's layout: "usage:" lines, a paragraph, the options ("  --name ARG   text" with
# continuation lines indented deeper), closing paragraphs, then titled blocks in the
# options' layout ("Environment:", "Exit status:"), each a section of the page
# (ENVIRONMENT, EXIT STATUS).
set -euo pipefail
bin=${1:?usage: scripts/manpage.sh BIN SYSCONFDIR}
sysconfdir=${2:?usage: scripts/manpage.sh BIN SYSCONFDIR}
version=$("$bin" --version | sed -n '1s/^embedscope \([^ ]*\).*/\1/p')
help=$("$bin" --help)
roff() { sed -e 's/\\/\\e/g' -e 's/-/\\-/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"; }
# items: an option-like list on stdin ("  NAME  text", continuation lines indented four or
# more) as .TP entries, the name in bold.
items() {
    awk '
      /^  [^ ]/ { sub(/^  /, ""); n = match($0, /  +/);
                  print ".TP";
                  if (n) { print substr($0, 1, n - 1); print substr($0, n + RLENGTH) } else print $0;
                  next }
      /^    / { sub(/^ +/, ""); print; next }
    ' | sed -e '/^\.TP$/!{s/\\/\\e/g; s/-/\\-/g}' -e '/^\.TP$/{n; s/-/\\-/g; s/^\([^ ]*\)\(.*\)$/\\fB\1\\fR\\fI\2\\fR/}'
}
# block TITLE: the lines of the titled block "TITLE:" of --help, up to the next empty line.
block() { awk -v t="$1:" '$0 == t {on = 1; next} on && /^$/ {exit} on {print}' <<<"$help"; }

echo ".TH EMBEDSCOPE 8 \"\" \"embedscope $version\" \"System Administration\""
echo ".SH NAME"
echo "embedscope \\- exact SVD analyses of transformer embedding matrices over HTTP"
echo ".SH SYNOPSIS"
echo ".nf"
sed -n '/^usage:/,/^$/p' <<<"$help" | sed '$d' | sed 's/^usage: //; s/^       //' | roff
echo ".fi"
echo ".SH DESCRIPTION"
awk 'BEGIN{p=0} /^$/{p++; next} p==1 && !/^  -/{print}' <<<"$help" | roff
echo ".SH OPTIONS"
awk '/^  -/{opt=1} opt && /^$/{exit} opt{print}' <<<"$help" | items
echo ".SH NOTES"
# the paragraphs between the options and the first titled block
awk '/^  -/{opt=1} opt && /^$/{tail=1; next} tail && /^[A-Z][a-z ]*:$/{exit} tail{print}' <<<"$help" | roff
echo ".SH ENVIRONMENT"
block Environment | items
echo ".SH EXIT STATUS"
block "Exit status" | items
cat <<EOF
.SH FILES
.TP
.I $sysconfdir/embedscope/embedscope.json
the configuration the systemd unit starts with (\\-\\-config); without \\-\\-config the daemon
serves its embedded default, whose data directory is the installed share/embedscope/data.
.TP
.I /var/lib/embedscope
the unit's StateDirectory: server.cache_dir (decompositions kept across restarts) and
uploads.dir (uploaded matrices) of the installed configuration.
.SH SIGNALS
SIGHUP reloads the configuration (systemctl reload embedscope); SIGTERM and SIGINT stop
the daemon after the running requests, within server.shutdown_grace_s.
.SH SEE ALSO
The API is described at /openapi.yaml of a running daemon; docs/ of the source tree.
EOF
