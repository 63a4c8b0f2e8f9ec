#!/usr/bin/env bash
# The man page embedscope(8), generated from the binary's own --help and --version
# (one source: what --help says is what the page says), like help2man but with no
# dependency beyond bash and sed.  usage: scripts/manpage.sh BIN SYSCONFDIR >embedscope.8
#
# --help's layout: "usage:" lines, a paragraph, the options ("  --name ARG   text" with
# continuation lines indented deeper), then closing paragraphs.
set -euo pipefail
bin=${1:?usage: scripts/manpage.sh BIN SYSCONFDIR}
sysconfdir=${2:?usage: scripts/manpage.sh BIN SYSCONFDIR}
version=$("$bin" --version | sed -n '1s/^embedscope \([^ ]*\).*/\1/p')
help=$("$bin" --help)
roff() { sed -e 's/\\/\\e/g' -e 's/-/\\-/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"; }

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
# An option line starts with two spaces and a dash; its text follows after two or more
# spaces on the same line or on the next lines (indented).
awk '
  /^  -/ { sub(/^  /, ""); n = match($0, /  +/);
           if (n) { print ".TP"; print substr($0, 1, n - 1); print substr($0, n + RLENGTH) }
           else { print ".TP"; print $0 }
           opt = 1; next }
  opt && /^    / { sub(/^ +/, ""); print; next }
  opt && /^$/ { exit }
' <<<"$help" | sed -e '/^\.TP$/!{s/\\/\\e/g; s/-/\\-/g}' -e '/^\.TP$/{n; s/-/\\-/g; s/^\([^ ]*\)\(.*\)$/\\fB\1\\fR\\fI\2\\fR/}'
echo ".SH NOTES"
awk '/^  -/{opt=1} opt && /^$/{tail=1; next} tail{print}' <<<"$help" | roff
cat <<EOF2
.SH FILES
.TP
.I $sysconfdir/embedscope/embedscope.json
the configuration the systemd unit starts with (--config); without --config the daemon
serves its embedded default, whose data directory is the installed share/embedscope/data.
.SH SIGNALS
SIGHUP reloads the configuration (systemctl reload embedscope); SIGTERM and SIGINT stop
the daemon after the running requests, within server.shutdown_grace_s.
.SH SEE ALSO
The API is described at /openapi.yaml of a running daemon; docs/ of the source tree.
EOF2
