"""A worker or parameter-server process of a ParameterServerStrategy cluster: it serves until it is stopped.

    TF_CONFIG='{"cluster": {...}, "task": {"type": "ps", "index": 0}}' python scripts/workers/ps_server.py

In asynchronous training the workers and parameter servers run no script of their own: they start a
TensorFlow server and wait for the coordinator (scripts/train_ps.py) to send them work. The launcher
stops them when the coordinator has finished.
"""

import json
import os

import tensorflow as tf

config = json.loads(os.environ["TF_CONFIG"])
task = config["task"]
server = tf.distribute.Server(
    tf.train.ClusterSpec(config["cluster"]),
    job_name=task["type"],
    task_index=task["index"],
    protocol="grpc",
    start=True,
)
print(f"{task['type']} {task['index']} serving at {server.target}", flush=True)
server.join()
