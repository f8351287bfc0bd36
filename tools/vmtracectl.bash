# bash completion for vmtracectl(8): commands, options, sample files, and
# guest names as the running daemon lists them (`vmtracectl guests`).
# Installed as /usr/share/bash-completion/completions/vmtracectl; by hand:
#   . tools/vmtracectl.bash

# The guests the daemon knows, one a line; nothing when it does not answer
# (not running, not allowed): one short request, errors dropped.
_vmtracectl_guests()
{
	local sock=$1
	timeout 2 vmtracectl ${sock:+-s "$sock"} guests 2>/dev/null |
		awk 'NR > 1 && !/^ / { print $1 }'
}

_vmtracectl_files()	# extension pattern, e.g. '@(vmts)'
{
	if declare -F _filedir >/dev/null; then
		_filedir "$1"
	else
		local IFS=$'\n'
		COMPREPLY=($(compgen -f -- "$cur"))
	fi
}

_vmtracectl()
{
	local cur prev sock="" cmd="" i w
	local commands="status guests metrics dump samples reload upgrade info merge report"
	COMPREPLY=()
	cur=${COMP_WORDS[COMP_CWORD]}
	prev=${COMP_WORDS[COMP_CWORD - 1]}

	# the command: the first word that is neither an option nor its argument
	for ((i = 1; i < COMP_CWORD; i++)); do
		w=${COMP_WORDS[i]}
		case $w in
		-s | --socket) sock=${COMP_WORDS[i + 1]}; ((i++)) ;;
		-*) ;;
		*) cmd=$w; break ;;
		esac
	done

	if [[ -z $cmd ]]; then
		case $prev in
		-s | --socket) _vmtracectl_files; return ;;
		esac
		if [[ $cur == -* ]]; then
			COMPREPLY=($(compgen -W "-s --socket --json -h --help -V --version" -- "$cur"))
		else
			COMPREPLY=($(compgen -W "$commands" -- "$cur"))
		fi
		return
	fi

	case $cmd in
	status | guests | metrics | reload | upgrade)
		COMPREPLY=($(compgen -W "-h --help" -- "$cur"))
		;;
	dump)
		case $prev in
		--window | --post | --reason | --timeout | -w | -p | -r | -t) return ;;
		esac
		if [[ $cur == -* ]]; then
			COMPREPLY=($(compgen -W "--window --post --reason --timeout --help" -- "$cur"))
		else
			COMPREPLY=($(compgen -W "$(_vmtracectl_guests "$sock")" -- "$cur"))
		fi
		;;
	samples)
		if [[ $cur == -* ]]; then
			COMPREPLY=($(compgen -W "-h --help" -- "$cur"))
		elif ((COMP_CWORD == i + 1)); then
			COMPREPLY=($(compgen -W "$(_vmtracectl_guests "$sock")" -- "$cur"))
		fi
		;;
	info)
		if [[ $cur == -* ]]; then
			COMPREPLY=($(compgen -W "-h --help" -- "$cur"))
		else
			_vmtracectl_files '@(vmts)'
		fi
		;;
	merge)
		case $prev in
		-o | --output | -d | --state-dir) _vmtracectl_files; return ;;
		-a | --aux) _vmtracectl_files '@(vmtaux)'; return ;;
		-c | --config) _vmtracectl_files '@(yaml|yml)'; return ;;
		--since | --until) return ;;
		esac
		if [[ $cur == -* ]]; then
			COMPREPLY=($(compgen -W "-o --output --aux -q --quiet --since --until -d --state-dir
				-c --config --help" -- "$cur"))
		else
			_vmtracectl_files '@(vmts)'
		fi
		;;
	report)
		case $prev in
		--aux) _vmtracectl_files '@(vmtaux)'; return ;;
		--cpu | --event | --since | --until) return ;;
		--guest) COMPREPLY=($(compgen -W "$(_vmtracectl_guests "$sock")" -- "$cur")); return ;;
		esac
		if [[ $cur == -* ]]; then
			COMPREPLY=($(compgen -W "--aux --cpu --event --guest --since --until --host-time
				--raw-time --stats --help" -- "$cur"))
		else
			_vmtracectl_files '@(vmts)'
		fi
		;;
	esac
} && complete -F _vmtracectl vmtracectl
