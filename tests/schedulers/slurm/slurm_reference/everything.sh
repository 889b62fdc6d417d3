#!/bin/bash
# Job array of 100 elements, at most 10 at once, written by diffsoup-campaign.
#SBATCH --job-name=fits-gpu
#SBATCH --array=0-99%10
#SBATCH --output=/scratch/me/fits/logs/%A_%a.out
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=4
#SBATCH --time=2-00:00:00
#SBATCH --partition=gpu
#SBATCH --account=proj42
#SBATCH --mem=16G
#SBATCH --gpus-per-task=1
#SBATCH --signal=B:USR1@300
#SBATCH --chdir=/scratch/me/fits
#SBATCH --qos=long
#SBATCH --constraint=a100

set -e
module load cuda/12.4
source /opt/venvs/fits/bin/activate
exec campaign worker /scratch/me/fits/ledger.json
