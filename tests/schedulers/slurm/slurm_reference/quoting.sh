#!/bin/bash
# Job array of 5 elements, written by diffsoup-campaign.
#SBATCH --job-name=q.1
#SBATCH --array=1,3,5-9:2
#SBATCH --output=/var/log/campaign/%A_%a.out
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --time=01:30:00

set -e
exec /usr/bin/python3 -m campaign worker '/data/my ledger.json' --note 'it'"'"'s $HOME'
