#!/bin/bash
# Job array of 4 elements, written by diffsoup-campaign.
#SBATCH --job-name=fits
#SBATCH --array=0-3
#SBATCH --output=logs/%A_%a.out
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1

set -e
exec campaign worker particles.json
