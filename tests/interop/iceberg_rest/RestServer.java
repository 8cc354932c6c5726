// An Apache Iceberg REST catalog for the interop tests: Iceberg's own RESTCatalogServlet and
// RESTCatalogAdapter (iceberg-core's test jar) over a JdbcCatalog on SQLite, on Jetty 12.
// Files are read and written on the local disk (no Hadoop).
//
//   java -cp <classes>:<iceberg-rest jars> RestServer <port> <dir>
import java.io.File;
import java.net.URI;
import java.util.Map;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.Files;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.io.InputFile;
import org.apache.iceberg.io.OutputFile;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.apache.iceberg.rest.RESTCatalogAdapter;
import org.apache.iceberg.rest.RESTCatalogServlet;
import org.eclipse.jetty.ee10.servlet.ServletContextHandler;
import org.eclipse.jetty.ee10.servlet.ServletHolder;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;

public class RestServer {
  /** FileIO for local paths and file: URIs. */
  public static class LocalFileIO implements FileIO {
    private static File f(String p) {
      return p.startsWith("file:") ? new File(URI.create(p)) : new File(p);
    }

    public InputFile newInputFile(String p) {
      return Files.localInput(f(p));
    }

    public OutputFile newOutputFile(String p) {
      return Files.localOutput(f(p));
    }

    public void deleteFile(String p) {
      f(p).delete();
    }
  }

  public static void main(String[] args) throws Exception {
    int port = Integer.parseInt(args[0]);
    String dir = args[1];
    new File(dir, "warehouse").mkdirs();
    JdbcCatalog catalog = new JdbcCatalog();
    catalog.initialize(
        "strata_test",
        Map.of(
            CatalogProperties.URI, "jdbc:sqlite:" + dir + "/catalog.db",
            CatalogProperties.WAREHOUSE_LOCATION, dir + "/warehouse",
            CatalogProperties.FILE_IO_IMPL, LocalFileIO.class.getName(),
            "jdbc.schema-version", "V1"));
    ServletContextHandler ctx = new ServletContextHandler();
    ctx.setContextPath("/");
    ctx.addServlet(new ServletHolder(new RESTCatalogServlet(new RESTCatalogAdapter(catalog))), "/*");
    Server server = new Server();
    ServerConnector conn = new ServerConnector(server);
    conn.setHost("127.0.0.1");
    conn.setPort(port);
    server.addConnector(conn);
    server.setHandler(ctx);
    server.start();
    System.out.println("ready");
    server.join();
  }
}
