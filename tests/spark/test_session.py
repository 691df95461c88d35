"""The local session's JVM: started with the heap and JVM options `spark.session` sets for a
short job on few cores (they only take effect if the session launches the JVM itself)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spark.session import LOCAL_DRIVER_JAVA_OPTIONS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_the_local_jvm_runs_with_the_short_job_options_and_heap(spark: SparkSession) -> None:
    jvm: Any = spark._jvm
    runtime = jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    arguments = list(runtime.getInputArguments())
    assert [option for option in LOCAL_DRIVER_JAVA_OPTIONS if option not in arguments] == []
    collectors = [
        bean.getName()
        for bean in jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    ]
    assert "PS Scavenge" in collectors  # the parallel collector, not G1
    assert jvm.java.lang.Runtime.getRuntime().maxMemory() > 1.5 * 2**30  # the 2 GiB heap
