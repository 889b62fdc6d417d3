#!/bin/bash
# Job array of 1 element, written by diffsoup-campaign.
#SBATCH --job-name=single
#SBATCH --array=0
#SBATCH --output=logs/%A_%a.out
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --time=01:00:00
#SBATCH --signal=B:USR1@120

set -e
exec campaign worker l.json
