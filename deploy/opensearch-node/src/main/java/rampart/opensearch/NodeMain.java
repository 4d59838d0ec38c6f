package rampart.opensearch;

import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;

import org.opensearch.cluster.service.ClusterService;
import org.opensearch.common.logging.LogConfigurator;
import org.opensearch.common.settings.Settings;
import org.opensearch.env.Environment;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;
import org.opensearch.plugins.Plugin;

/**
 * Starts one OpenSearch node in this JVM from artifacts resolved by Maven (see pom.xml).
 *
 * <p>Why not org.opensearch.bootstrap.OpenSearch: that entry point expects a distribution layout with
 * its modules as plugin bundles, and Central publishes modules as plain jars. Here the modules run as
 * classpath plugins (as OpenSearch's own test framework does); painless, analysis-common and k-NN load as
 * bundles from the plugins directory. The node is bound to loopback, so OpenSearch's production
 * bootstrap checks do not apply, and no security plugin is installed.
 *
 * <p>Usage: NodeMain CONFIG_DIR. Settings come from CONFIG_DIR/opensearch.yml, written by
 * `rampart opensearch up` (services/cli/opensearch.py) or the test fixture. The JVM stays up until it is
 * signalled; the shutdown hook closes the node so that its data directory is left consistent.
 */
public final class NodeMain {
    private static final List<String> MODULES = List.of(
            "org.opensearch.transport.Netty4Plugin",
            "org.opensearch.index.mapper.MapperExtrasPlugin",
            "org.opensearch.index.reindex.ReindexPlugin");

    private NodeMain() {}

    /** A Node that accepts classpath plugins (the constructor is protected for that use). */
    static final class ClasspathNode extends Node {
        ClasspathNode(Environment env, Collection<Class<? extends Plugin>> plugins) {
            super(env, plugins, true);
        }

        @Override
        protected void configureNodeAndClusterIdStateListener(ClusterService clusterService) {
            // The listener sets node ids in the logging context once per JVM; not needed here.
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: NodeMain CONFIG_DIR (holding opensearch.yml and log4j2.properties)");
            System.exit(2);
        }
        Path configDir = Paths.get(args[0]).toAbsolutePath();
        Settings settings = Settings.builder().loadFromPath(configDir.resolve("opensearch.yml")).build();
        Environment env = InternalSettingsPreparer.prepareEnvironment(
                settings, Collections.emptyMap(), configDir, () -> settings.get("node.name", "rampart"));
        LogConfigurator.registerErrorListener();
        LogConfigurator.configure(env);

        List<Class<? extends Plugin>> modules = new java.util.ArrayList<>();
        for (String name : MODULES) {
            modules.add(Class.forName(name).asSubclass(Plugin.class));
        }
        Node node = new ClasspathNode(env, modules);
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                node.close();
            } catch (Exception e) {
                e.printStackTrace();
            } finally {
                stopped.countDown();
            }
        }, "rampart-opensearch-shutdown"));
        node.start();
        // OpenSearch's threads are daemons: this keeps the JVM alive until the shutdown hook runs.
        stopped.await();
    }
}
