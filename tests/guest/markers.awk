# Host send (vmtraced-sync), guest receipt (vmtrace-sync), host receipt
# (vmtraced-synced) markers of each probe, from `trace-cmd report -t -i host -i guest`.
function ts() { match($0, / [0-9]+\.[0-9]+: /); return substr($0, RSTART + 1, RLENGTH - 3) + 0 }
/ vmtraced-sync [^ ]+ [0-9]+$/ { s[$NF] = ts() }
/ vmtrace-sync [0-9]+$/ { g[$NF] = ts() }
/ vmtraced-synced [^ ]+ [0-9]+$/ { r[$NF] = ts() }
END { for (k in g) if ((k in s) && (k in r)) printf "%d %.9f %.9f %.9f\n", k, s[k], g[k], r[k] }
