#!/bin/sh
# Host discovery for Horovod Elastic on one machine. Elastic mode refuses a single host, so this
# machine is named twice (both names are local), with one slot each.
echo localhost:1
echo 127.0.0.1:1
